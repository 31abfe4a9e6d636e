/**
 * The purge: forgets expired keys in small batches.
 *
 * Guarantee: deletes only roots whose expiry has passed and that are not in
 * progress (an in-progress or waiting row has no expiry: its lease or its
 * wait governs it), together with their steps, the keys claimed under them,
 * their attempts, their mailbox, a failed run's queue entry and the child
 * runs that have ended; a child run whose parent is still unfinished is kept
 * (the parent reads it when it resumes). Rows another purger is deleting are
 * skipped, not waited for. A message that a send (holding the run's row)
 * committed after the statement's snapshot is deleted by a second statement
 * from a fresh snapshot, as when a claim forgets a key (see takeover.ts).
 *
 * Expired roots are found across scopes by a read, then deleted one scope at a
 * time: each statement names its scope (on Citus it runs on that scope's node).
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import { forgetMailStatement } from './takeover.js';

export async function purgeExpiredRows(
  q: Queryable,
  clock: Clock,
  batchSize: number,
): Promise<{ roots: number; children: number }> {
  // Across scopes, only a read (no lock: on Citus a locking read across shards is refused); each
  // scope's keys are then deleted by one statement that names the scope and decides again.
  const candidates = await q<{ scope: string; key: string }[]>`
    select l.scope, l.key
      from stepkey.ledger l
     where l.parent_key is null and l.expires_at <= ${sqlNow(q, clock)} and l.status <> 'in_progress'
       -- Never a child run whose parent is unfinished (purgeScope keeps it): a batch of those alone
       -- would be read again and again, and nothing behind them purged.
       and (l.parent_run is null or not exists (
             select 1 from stepkey.ledger p
              where p.scope = l.scope and p.key = l.parent_run and p.status in ('in_progress', 'waiting', 'failed')))
     order by l.expires_at
     limit ${batchSize}`;
  const byScope = new Map<string, string[]>();
  for (const { scope, key } of candidates) {
    const keys = byScope.get(scope);
    if (keys) keys.push(key);
    else byScope.set(scope, [key]);
  }
  const total = { roots: 0, children: 0 };
  for (const [scope, keys] of byScope) {
    const purged = await purgeScope(q, clock, scope, keys);
    total.roots += purged.roots;
    total.children += purged.children;
  }
  return total;
}

/** Deletes the expired roots `keys` of one scope (one node on Citus) with what hangs on them. */
async function purgeScope(q: Queryable, clock: Clock, scope: string, keys: readonly string[]): Promise<{ roots: number; children: number }> {
  const now = sqlNow(q, clock);
  const [row] = await q<{ roots: number; children: number; gone: string[] }[]>`
    with doomed as (
      select l.scope, l.key
        from stepkey.ledger l
       where l.scope = ${scope} and l.key = any(${keys as string[]}::text[])
         and l.parent_key is null and l.expires_at <= ${now} and l.status <> 'in_progress'
         and (l.parent_run is null or not exists (
               select 1 from stepkey.ledger p
                where p.scope = ${scope} and p.scope = l.scope and p.key = l.parent_run and p.status in ('in_progress', 'waiting', 'failed')))
         for update skip locked
    ), ended_children as (
      select c.scope, c.key
        from stepkey.ledger c
        join doomed d on c.scope = ${scope} and c.scope = d.scope and c.parent_run = d.key
       where c.status in ('completed', 'cancelled', 'deadline_exceeded', 'failed')
         for update of c skip locked
    ), gone as (
      select scope, key from doomed union select scope, key from ended_children
    ), steps as (
      delete from stepkey.steps s using gone g where s.scope = ${scope} and s.scope = g.scope and s.run_key = g.key returning 1
    ), keyed as (
      delete from stepkey.ledger k using gone g where k.scope = ${scope} and k.scope = g.scope and k.parent_key = g.key returning 1
    ), mail as (
      delete from stepkey.mailbox m using gone g where m.scope = ${scope} and m.scope = g.scope and m.run_key = g.key returning 1
    ), attempts as (
      delete from stepkey.step_attempts a using gone g where a.scope = ${scope} and a.scope = g.scope and a.run_key = g.key returning 1
    ), entries as (
      delete from stepkey.queue_entries e using gone g where e.scope = ${scope} and e.scope = g.scope and e.key = g.key returning 1
    ), roots as (
      delete from stepkey.ledger l using gone g where l.scope = ${scope} and l.scope = g.scope and l.key = g.key returning 1
    )
    select (select count(*) from roots)::int as roots,
           ((select count(*) from steps) + (select count(*) from keyed) + (select count(*) from mail) + (select count(*) from attempts))::int as children,
           coalesce((select array_agg(key) from gone), '{}'::text[]) as gone`;
  if (!row) return { roots: 0, children: 0 };
  if (row.roots > 0) await forgetMailStatement(q, scope, row.gone);
  return { roots: row.roots, children: row.children };
}
