/**
 * Cancelling a run: it is finished as cancelled, with the reason stored as its
 * outcome — and so is every child run it waits on, down the chain of runs
 * parked on a child.
 *
 * Guarantee: only runs that are in progress, waiting or failed are
 * cancelled; their lease token is cleared, so a process running one fails its
 * next fenced write and stops at that step boundary — a step in flight either
 * committed before the cancel or not at all. A cancelled child that a parent
 * waits on marks that parent due (its row locked first, as a child's end
 * does: see waits/sql/child-runs.ts).
 *
 * The chain is read from the statement's snapshot, so the runs in it are
 * locked first, down the chain (lockChainStatement, one level a statement):
 * a run that is deciding to park on a child holds its row until its park has
 * committed, and the level below is read after that, so a child started by a
 * park that commits while the cancel waits is in the chain too.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';

/**
 * Locks the runs `keys` (waiting for a wait that holds one to commit) and
 * returns the child each is parked on, read after the lock: the next level.
 */
export async function lockChainStatement(q: Queryable, scope: string, keys: readonly string[]): Promise<string[]> {
  // No condition on the status: a run that is only now parking must be waited for, not skipped.
  const rows = await q<{ status: string; wait_kind: string | null; wait_for: string | null }[]>`
    select status, wait_kind, wait_for
      from stepkey.ledger
     where scope = ${scope} and key in (select json_array_elements_text(${JSON.stringify(keys)}::json))
       and kind = 'run'
       for no key update`;
  return rows.flatMap((row) => (row.status === 'waiting' && row.wait_kind === 'child' && row.wait_for ? [row.wait_for] : []));
}

export function cancelRunsStatement(q: Queryable, clock: Clock, ref: KeyRef, outcome: string, retentionMs: number) {
  const now = sqlNow(q, clock);
  return q<{ key: string; parent_run: string | null }[]>`
    with recursive chain (scope, key, depth) as (
      select scope, key, 0 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key} and kind = 'run'
      union all
      select c.scope, c.key, chain.depth + 1
        from chain
        join stepkey.ledger r on r.scope = chain.scope and r.key = chain.key
        join stepkey.ledger c on c.scope = r.scope and c.key = r.wait_for and c.parent_run = r.key
       where r.status = 'waiting' and r.wait_kind = 'child' and chain.depth < 64
    )
    update stepkey.ledger l
       set status = 'cancelled',
           outcome = ${outcome},
           outcome_ok = false,
           lease_token = null,
           locked_until = null,
           completed_at = ${now},
           updated_at = ${now},
           expires_at = ${now} + ${retentionMs}::float8 * interval '1 millisecond'
      from chain
     where l.scope = chain.scope and l.key = chain.key
       and l.status in ('in_progress', 'waiting', 'failed')
    returning l.key, l.parent_run`;
}
