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
 * Expired roots are found across scopes by a read, then deleted: on one
 * PostgreSQL by one statement for the batch, on Citus one scope at a time
 * (each statement names its scope, and runs on that scope's node).
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import { tablesDistributed } from '../../db/citus.js';
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
  if (candidates.length === 0) return { roots: 0, children: 0 };
  if (!(await tablesDistributed(q))) return purgeRoots(q, clock, null, candidates);
  const byScope = new Map<string, { scope: string; key: string }[]>();
  for (const root of candidates) {
    const roots = byScope.get(root.scope);
    if (roots) roots.push(root);
    else byScope.set(root.scope, [root]);
  }
  const total = { roots: 0, children: 0 };
  for (const [scope, roots] of byScope) {
    const purged = await purgeRoots(q, clock, scope, roots);
    total.roots += purged.roots;
    total.children += purged.children;
  }
  return total;
}

/**
 * Deletes the expired `roots` with what hangs on them: all of one `scope`
 * (Citus: every part names it), or with `scope` null those of any scope.
 */
async function purgeRoots(q: Queryable, clock: Clock, scope: string | null, roots: readonly { scope: string; key: string }[]): Promise<{ roots: number; children: number }> {
  const now = sqlNow(q, clock);
  const keys = roots.map((root) => root.key);
  const chosen =
    scope === null
      ? q`(l.scope, l.key) in (select * from unnest(${roots.map((root) => root.scope)}::text[], ${keys}::text[]))`
      : q`l.scope = ${scope} and l.key = any(${keys}::text[])`;
  /** `alias.scope = scope and` on Citus; nothing on one PostgreSQL (each part joins on the scope anyway). */
  const pinned = (alias: string) => (scope === null ? q`` : q`${q(alias)}.scope = ${scope} and`);
  const [row] = await q<{ roots: number; children: number; gone: { scope: string; key: string }[] }[]>`
    with doomed as (
      select l.scope, l.key
        from stepkey.ledger l
       where ${chosen}
         and l.parent_key is null and l.expires_at <= ${now} and l.status <> 'in_progress'
         and (l.parent_run is null or not exists (
               select 1 from stepkey.ledger p
                where ${pinned('p')} p.scope = l.scope and p.key = l.parent_run and p.status in ('in_progress', 'waiting', 'failed')))
         for update skip locked
    ), ended_children as (
      select c.scope, c.key
        from stepkey.ledger c
        join doomed d on ${pinned('c')} c.scope = d.scope and c.parent_run = d.key
       where c.status in ('completed', 'cancelled', 'deadline_exceeded', 'failed')
         for update of c skip locked
    ), gone as (
      select scope, key from doomed union select scope, key from ended_children
    ), steps as (
      delete from stepkey.steps s using gone g where ${pinned('s')} s.scope = g.scope and s.run_key = g.key returning 1
    ), keyed as (
      delete from stepkey.ledger k using gone g where ${pinned('k')} k.scope = g.scope and k.parent_key = g.key returning 1
    ), mail as (
      delete from stepkey.mailbox m using gone g where ${pinned('m')} m.scope = g.scope and m.run_key = g.key returning 1
    ), attempts as (
      delete from stepkey.step_attempts a using gone g where ${pinned('a')} a.scope = g.scope and a.run_key = g.key returning 1
    ), entries as (
      delete from stepkey.queue_entries e using gone g where ${pinned('e')} e.scope = g.scope and e.key = g.key returning 1
    ), roots as (
      delete from stepkey.ledger l using gone g where ${pinned('l')} l.scope = g.scope and l.key = g.key returning 1
    )
    select (select count(*) from roots)::int as roots,
           ((select count(*) from steps) + (select count(*) from keyed) + (select count(*) from mail) + (select count(*) from attempts))::int as children,
           coalesce((select json_agg(json_build_object('scope', scope, 'key', key)) from gone), '[]'::json) as gone`;
  if (!row) return { roots: 0, children: 0 };
  if (row.roots > 0) await forgetMailStatement(q, row.gone, scope);
  return { roots: row.roots, children: row.children };
}
