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
 * queue entry back in line (lifecycle/requeue.ts): the queue's next dispatch,
 * in any sweep, starts it when a slot is free. Like a takeover, it never waits
 * for a claimant working under the key's advisory lock: then it changes
 * nothing.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { backInLine, lineOf, resumedSet } from './requeue.js';

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
    ), line as materialized (${lineOf(q, ref.scope, ref.key, { token: randomUUID(), lockedUntil: now })}
    ), made as (
      update stepkey.ledger l
         set ${resumedSet(q)},
             expires_at = null,
             updated_at = ${now}
        from line
       where l.scope = ${ref.scope} and l.key = ${ref.key} and l.kind = 'run'
         and (l.status = 'failed' or (l.status = 'in_progress' and l.locked_until <= ${now}))
         and l.status = line.status
         and (l.expires_at is null or l.expires_at > ${now})
         and (select held from lock)
      returning l.status = 'waiting' as requeued
    ), back_in_line as (${backInLine(q, ref.scope, ref.key, 'made')}
    )
    select exists (select 1 from made) as applied, not (select held from lock) as busy,
           exists (select 1 from stepkey.ledger
                    where scope = ${ref.scope} and key = ${ref.key} and expires_at <= ${now}) as expired`;
  return { applied: row!.applied, busy: row!.busy, expired: row!.expired };
}
