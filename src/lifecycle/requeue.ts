/**
 * Requeue: a failed run on a queue, resumed, goes back in line for a slot.
 * The two writes that resume a failed run — a claim's takeover
 * (ledger/sql/takeover.ts) and the operator's resume (lifecycle/resume.ts)
 * — are built from these parts, as CTEs of one statement:
 *
 *   line          (materialized) the run's status as the statement's
 *                 snapshot saw it, and — when that is failed — the queue of
 *                 its entry if the entry is marked failed (flow_release marks
 *                 it when the run fails)
 *   resumedSet    the SET of the resuming UPDATE (`from line`): in progress
 *                 under the lease given, or — with an entry to put back —
 *                 parked waiting for a slot, with no lease
 *   backInLine    the entry put back in line, when that UPDATE parked the run
 *
 * The resuming UPDATE also requires `l.status = line.status`: what it decided
 * from the snapshot holds for the row it writes. A row whose status changed
 * meanwhile (a stuck run failed by its stalled holder, whose entry is now
 * marked failed) is not written; the caller reads it again.
 *
 * Guarantee: a failed run on a queue resumes only as a park waiting for a
 * slot (wait_kind 'slot', no lease), its entry back in line at its old place
 * (seq unchanged), in the statement that resumes it; the queue's dispatch
 * alone starts it then. The database refuses the other way
 * (ledger_flow_resume_guard, migration 0014).
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import { SLOT_WAIT_STEP_PREFIX } from './slot-wait.js';

type Fragment = postgres.PendingQuery<postgres.Row[]>;

/**
 * The body of the `line` CTE (materialized): the run's status and, for a
 * failed run, its failed entry's queue or null — and the lease the resuming
 * write gives it (`token`, `locked_until`: computed here, so that the UPDATE's
 * CASEs read columns, not the clock).
 */
export function lineOf(q: Queryable, scope: string, key: string, lease: { token: string; lockedUntil: Fragment }): Fragment {
  return q`
    select r.status,
           case when r.status = 'failed' then
             (select e.queue from stepkey.queue_entries e where e.scope = ${scope} and e.key = ${key} and e.failed)
           end as queue,
           ${lease.token}::uuid as token, ${lease.lockedUntil} as locked_until
      from stepkey.ledger r
     where r.scope = ${scope} and r.key = ${key}`;
}

/** The SET list of the resuming UPDATE of ledger row `l`, joined to `line`. */
export function resumedSet(q: Queryable): Fragment {
  return q`
    status = case when line.queue is null then 'in_progress' else 'waiting' end,
    lease_token = case when line.queue is null then line.token end,
    locked_until = case when line.queue is null then line.locked_until end,
    wait_kind = case when line.queue is null then l.wait_kind else 'slot' end,
    wait_step = case when line.queue is null then l.wait_step else ${SLOT_WAIT_STEP_PREFIX}::text || line.queue end,
    wait_for = case when line.queue is null then l.wait_for else line.queue end,
    wake_at = case when line.queue is null then l.wake_at end,
    wait_until = case when line.queue is null then l.wait_until end`;
}

/** The body of the CTE that puts the entry back in line when `resumed` (a CTE returning `requeued`) parked the run. */
export function backInLine(q: Queryable, scope: string, key: string, resumed: string): Fragment {
  return q`
    update stepkey.queue_entries e set failed = false
     where e.scope = ${scope} and e.key = ${key} and e.failed
       and (select requeued from ${q(resumed)})`;
}
