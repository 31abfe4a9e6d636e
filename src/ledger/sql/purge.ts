/**
 * The purge: forgets expired keys in small batches.
 *
 * Guarantee: deletes only roots whose expiry has passed and that are not in
 * progress (an in-progress row has no expiry: its lease governs it), together
 * with their children; rows another purger is deleting are skipped, not
 * waited for.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';

export async function purgeExpiredRows(
  q: Queryable,
  clock: Clock,
  batchSize: number,
): Promise<{ roots: number; children: number }> {
  const now = sqlNow(q, clock);
  const [row] = await q<{ roots: number; children: number }[]>`
    with doomed as (
      select scope, key
        from stepkey.ledger
       where parent_key is null and expires_at <= ${now} and status <> 'in_progress'
       order by expires_at
       limit ${batchSize}
       for update skip locked
    ), children as (
      delete from stepkey.ledger c
       using doomed d
       where c.scope = d.scope and c.parent_key = d.key
      returning 1
    ), roots as (
      delete from stepkey.ledger l
       using doomed d
       where l.scope = d.scope and l.key = d.key
      returning 1
    )
    select (select count(*) from roots)::int as roots, (select count(*) from children)::int as children`;
  return row ?? { roots: 0, children: 0 };
}
