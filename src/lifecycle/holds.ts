/**
 * What a run holds besides its lease — a queue's entry or slot, a step
 * limit's slots — given back by the transition that moves the run, in the
 * same statement, so that nothing reaches from a run's row into other rows
 * by trigger:
 *
 *   end    (completed, cancelled, deadline exceeded) its queue entry goes and
 *          its limit slots are given back
 *   fail   its queue slot is given back, its entry kept and marked failed (a
 *          resume puts it back in line: requeue.ts), its limit slots given back
 *   park   (any wait but a queue slot's) its queue slot is given back, its
 *          entry kept in line; its limit slots are given back
 *
 * A limit slot given back marks the longest waiter of its limit and
 * partition due (stepkey.limit_give_back, migration 0008). On Citus the
 * statement runs on the scope's node, where the limits' partitions are not:
 * there the slots stay with the moved run and the coordinator gives them
 * back in the same transaction (flow/limit-release.ts), or a sweep does. The CTEs are
 * appended after the transition's `moved` CTE, which returns the run's row
 * when the transition applied; the statement's final SELECT must read
 * `holdsRead` so that the give-back runs (a SELECT CTE nobody reads is never
 * run). Whatever the run was marked (`flow`), what it holds is given back.
 */
import { SqlText, type StatementText } from '../db/statement-text.js';
import type { KeyRef } from '../ledger/types.js';

export type HoldsGivenBack = 'end' | 'fail' | 'park';

/** Appends `, holds_queue as (…), holds_limits as (…)` for the run `ref` moved by the CTE `moved`. */
export function giveBackHolds(b: StatementText, ref: KeyRef, how: HoldsGivenBack, moved = 'moved'): void {
  if (how === 'end') {
    b.sql`, holds_queue as (
      delete from stepkey.queue_entries e
       where e.scope = ${ref.scope} and e.key = ${ref.key} and exists (select 1 from ${raw(moved)})
      returning 1)`;
  } else {
    const failed = how === 'fail' ? ', failed = true' : '';
    b.sql`, holds_queue as (
      update stepkey.queue_entries e set holding = false, granted_token = null${raw(failed)}
       where e.scope = ${ref.scope} and e.key = ${ref.key} and ${raw(how === 'fail' ? 'true' : 'e.holding')}
         and exists (select 1 from ${raw(moved)})
      returning 1)`;
  }
  // The limit give-back runs only for a run that holds a slot: a run that holds none (most runs)
  // costs one index probe here, not a function call. On Citus the slots are given back on the
  // coordinator instead (limit_slots_given_back_inline() is false there: migration 0017).
  b.sql`, holds_limits as (
      select g.woken_scope, g.woken_key
        from (select m.scope, m.key from ${raw(moved)} m
               where stepkey.limit_slots_given_back_inline()
                 and exists (select 1 from stepkey.limit_slots s where s.scope = ${ref.scope} and s.key = ${ref.key})) held,
             lateral stepkey.limit_give_back(held.scope, held.key, null, null) g)`;
}

/** What the final SELECT reads so that the give-back runs: the number of runs a limit slot given back marked due. */
export const holdsRead = '(select count(*) from holds_limits)';

/** SQL spliced in as written (a CTE's name, a fixed clause). */
const raw = (text: string) => new SqlText(text);
