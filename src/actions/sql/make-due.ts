/**
 * Making a run due: the one way an operator's "resume" is written. The
 * process that asks does not run the workflow; any sweeper does, within
 * about one sweep.
 *
 * Guarantee: only a failed run (its retries ran out) or a stuck one (in
 * progress, lease expired), not expired, changes: it is in progress again
 * with a fresh lease token — fencing out whoever held the old one — and a
 * lease that has already ended, so the next sweep of any process takes it
 * (FOR UPDATE SKIP LOCKED, a new token of its own). A failed run on a
 * queue is parked waiting for a slot instead, in this same statement, its
 * queue entry back in line: the queue's next dispatch, in any sweep, starts
 * it when a slot is free (the database refuses the other way: migration
 * 0014's ledger_flow_resume_guard). Like a takeover, it never waits
 * for a claimant working under the key's advisory lock: then it changes
 * nothing.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';

export interface MadeDue {
  /** The run changed: it is due now. */
  applied: boolean;
  /** Nothing changed because another claimant holds the key's advisory lock (try again in a moment). */
  busy: boolean;
  /** Nothing changed because the run's retention has ended: its key is a new request now. */
  expired: boolean;
}

export async function makeRunDue(q: Queryable, clock: Clock, ref: KeyRef): Promise<MadeDue> {
  const now = sqlNow(q, clock);
  const [row] = await q<MadeDue[]>`
    with lock as materialized (
      select pg_try_advisory_xact_lock(hashtextextended(${ref.scope} || chr(31) || ${ref.key}, 0)) as held
    ), line as (
      -- A failed run's queue entry, marked failed when it failed (flow_release): only a failed run has one.
      select (select e.queue from stepkey.queue_entries e
               where e.scope = ${ref.scope} and e.key = ${ref.key} and e.failed) as queue
    ), made as (
      update stepkey.ledger l
         set status = case when line.queue is null then 'in_progress' else 'waiting' end,
             lease_token = case when line.queue is null then gen_random_uuid() end,
             locked_until = case when line.queue is null then ${now} end,
             wait_kind = case when line.queue is null then l.wait_kind else 'slot' end,
             wait_step = case when line.queue is null then l.wait_step else 'queue:' || line.queue end,
             wait_for = case when line.queue is null then l.wait_for else line.queue end,
             wake_at = case when line.queue is null then l.wake_at end,
             expires_at = null,
             updated_at = ${now}
        from line
       where l.scope = ${ref.scope} and l.key = ${ref.key} and l.kind = 'run'
         and (l.status = 'failed' or (l.status = 'in_progress' and l.locked_until <= ${now}))
         and (l.expires_at is null or l.expires_at > ${now})
         and (select held from lock)
      returning l.status = 'waiting' as requeued
    ), back_in_line as (
      -- Guarantee: a failed run on a queue resumes only as a park waiting for a slot, its entry
      -- back in line at its old place (seq unchanged), in the statement that resumes it.
      update stepkey.queue_entries e set failed = false
       where e.scope = ${ref.scope} and e.key = ${ref.key} and e.failed
         and (select requeued from made)
    )
    select exists (select 1 from made) as applied, not (select held from lock) as busy,
           exists (select 1 from stepkey.ledger
                    where scope = ${ref.scope} and key = ${ref.key} and expires_at <= ${now}) as expired`;
  return { applied: row!.applied, busy: row!.busy, expired: row!.expired };
}
