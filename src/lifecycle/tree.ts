/**
 * Cancel, and the end at a deadline: a run and every descendant — its child
 * runs, theirs, … found by their parent link (`parent_run`, same scope), not
 * by what anyone waits for, so a child started with `startChild` and a
 * parent still executing are included — end in one transaction:
 *
 *   the root       cancelled, or deadline_exceeded, its outcome stored
 *   descendants    cancelled, their outcome naming the root
 *   every one      its lease cleared (a process executing it fails its next
 *                  fenced write and stops at that step boundary: a step in
 *                  flight either committed before or not at all), its queue
 *                  entry and limit slots given back (holds.ts)
 *   root's parent  marked due if it waits on the root (wake.ts), as any
 *                  child's end does
 *
 * Guarantee: only runs that have not ended (running, waiting, failed)
 * change, and nothing does unless the root qualifies — it has not ended,
 * and, for a holder ending its own run at its deadline, its lease is still
 * the caller's; for the sweep, its deadline has passed by the database's
 * clock. The tree is locked first, one level a statement, root down
 * (FOR NO KEY UPDATE): a parent starting a child commits the child's row in
 * a transaction that holds its own row, so a child whose start commits while
 * the lock waits is seen at the next level. Every statement names its scope,
 * the recursion's branch included.
 */
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { SqlText, StatementText } from '../db/statement-text.js';
import type { TxSql } from '../db/transaction.js';
import { toJsonText, type StoredError } from '../ledger/outcome.js';
import type { KeyRef, Lease } from '../ledger/types.js';
import { lockParentStatement, wakeParentStatement } from './wake.js';

/** How deep a tree is followed. */
const MAX_DEPTH = 64;

export interface TreeEnd {
  /** What the root becomes. */
  status: 'cancelled' | 'deadline_exceeded';
  /** The root's stored outcome. */
  outcome: StoredError;
  /** A descendant's stored outcome (it is cancelled with its ancestor). */
  descendant: StoredError;
  /** The root is ended by the holder of its lease only (its own deadline, at a step boundary). */
  fence?: Lease;
  /** The root is ended only if its deadline has passed (the sweep). */
  pastDeadline?: boolean;
}

export interface EndedTree {
  /** Whether the root ended here. */
  applied: boolean;
  /** Every run ended: the root first, then its descendants. */
  keys: string[];
  /** The root's parent run, woken if it waited on the root. */
  parentRun: string | null;
}

/**
 * Locks the runs `keys` and returns their child runs, read after the lock:
 * the next level. No condition on the status: a run that is only now
 * starting a child must be waited for, not skipped.
 */
export async function lockLevelStatement(q: Queryable, scope: string, keys: readonly string[], root: boolean): Promise<string[]> {
  const level = JSON.stringify(keys);
  if (root) {
    await q`select 1 from stepkey.ledger where scope = ${scope} and key = ${keys[0]!} and kind = 'run' for no key update`;
  }
  const rows = await q<{ key: string }[]>`
    select key from stepkey.ledger
     where scope = ${scope} and parent_run in (select json_array_elements_text(${level}::json)) and kind = 'run'
       for no key update`;
  return rows.map((row) => row.key);
}

/** The UPDATE of the whole tree, with its holds given back; returns each run ended and the root's parent. */
export function endTreeStatement(q: Queryable, clock: Clock, ref: KeyRef, end: TreeEnd, retentionMs: number) {
  const b = new StatementText();
  const now = b.now(clock);
  const fence = end.fence ? new SqlText(` and r.lease_token = ${b.param(end.fence.token)}::uuid and r.status = 'in_progress'`) : new SqlText('');
  const due = end.pastDeadline ? new SqlText(` and r.deadline_at <= ${now.text}`) : new SqlText('');
  b.sql`
    with recursive root as (
      select r.scope, r.key from stepkey.ledger r
       where r.scope = ${ref.scope} and r.key = ${ref.key} and r.kind = 'run'
         and r.status in ('in_progress', 'waiting', 'failed')${fence}${due}
    ), tree (scope, key, depth) as (
      select scope, key, 0 from root
      union all
      select c.scope, c.key, tree.depth + 1
        from tree join stepkey.ledger c on c.scope = ${ref.scope} and c.scope = tree.scope and c.parent_run = tree.key
       where c.kind = 'run' and tree.depth < ${MAX_DEPTH}::int
    ), moved as (
      update stepkey.ledger l
         set status = case when l.key = ${ref.key} then ${end.status} else 'cancelled' end,
             outcome = case when l.key = ${ref.key} then ${toJsonText(end.outcome, 'outcome')} else ${toJsonText(end.descendant, 'outcome')} end,
             outcome_ok = false,
             lease_token = null,
             locked_until = null,
             completed_at = ${now},
             updated_at = ${now},
             expires_at = ${now} + ${retentionMs}::float8 * interval '1 millisecond'
        from tree
       where l.scope = ${ref.scope} and l.scope = tree.scope and l.key = tree.key
         and l.status in ('in_progress', 'waiting', 'failed')
      returning l.scope, l.key, l.parent_run
    ), left_queues as (
      delete from stepkey.queue_entries e using moved m where e.scope = ${ref.scope} and e.scope = m.scope and e.key = m.key returning 1
    ), limits_back as (
      -- Called only for a run that holds a limit slot (as holds.ts does): most runs hold none. On
      -- Citus the slots stay until the coordinator gives them back: at the end of an execution moved
      -- under its process, or in a sweep.
      select g.woken_scope
        from (select m.scope, m.key from moved m
               where stepkey.limit_slots_given_back_inline()
                 and exists (select 1 from stepkey.limit_slots s where s.scope = ${ref.scope} and s.scope = m.scope and s.key = m.key)) held,
             lateral stepkey.limit_give_back(held.scope, held.key, null, null) g
    )
    select m.key, m.parent_run, (select count(*) from limits_back) as woken
      from moved m
     order by m.key = ${ref.key} desc`;
  return b.query<{ key: string; parent_run: string | null }[]>(q);
}

/**
 * Ends the tree (see above) inside the caller's transaction; never commits.
 * The caller opens one of its own when it has none, retrying it on a
 * deadlock: a child finishing at the same moment locks itself, then its
 * parent, while this locks down the tree (db/retrying-transaction.ts).
 */
export async function endTreeIn(
  tx: TxSql,
  clock: Clock,
  ref: KeyRef,
  end: TreeEnd,
  retentionMs: number,
): Promise<EndedTree> {
  for (let level = [ref.key], depth = 0; level.length > 0 && depth <= MAX_DEPTH; depth += 1) {
    level = await lockLevelStatement(tx, ref.scope, level, depth === 0);
  }
  const rows = await endTreeStatement(tx, clock, ref, end, retentionMs);
  const root = rows.find((row) => row.key === ref.key);
  const parentRun = root?.parent_run ?? null;
  if (parentRun) {
    await lockParentStatement(tx, ref.scope, parentRun);
    await wakeParentStatement(tx, clock, ref.scope, parentRun, ref.key);
  }
  return { applied: root !== undefined, keys: rows.map((row) => row.key), parentRun };
}
