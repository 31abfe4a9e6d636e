/**
 * Take over: the rare path of a run's claim. A run whose holder's lease ran
 * out, or a run that failed and may be resumed, is owned again by whoever
 * updates it first. (The claim of a key that is not a run takes over with
 * ledger/sql/takeover.ts.)
 *
 * Guarantee: only with the same fingerprint, and only while the row is still
 * expired or failed — of two contenders exactly one gets a row back. The new
 * lease token fences the old holder out of every later write. Like the claim,
 * it never waits for another claimant's work: it first takes the key's
 * advisory lock (evaluated once, before any row is touched), and a `once`
 * that took the key over and still works holds that lock — the answer is then
 * no row, and the claim reports "in progress".
 *
 * A failed run on a queue is not taken into progress: the same statement
 * parks it waiting for a slot and puts its queue entry back in line
 * (requeue.ts), and the row comes back `waiting` — the claim
 * reports it so, and the queue's dispatch starts the run. A queued run in
 * progress whose lease expired keeps its slot (`heldQueue`): whoever took it
 * over dispatches its queue once it has stopped executing (engine/local-runs.ts).
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { ClaimPaths } from '../ledger/claim.js';
import type { TakenOver } from '../ledger/sql/takeover.js';
import type { ClaimRequest } from '../ledger/types.js';
import { forgetExpiredRun } from './expire.js';
import { backInLine, lineOf, resumedSet } from './requeue.js';


export async function takeOverRun(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
): Promise<TakenOver | undefined> {
  const now = sqlNow(q, clock);
  const rows = await q<TakenOver[]>`
    with line as materialized (${lineOf(q, request.scope, request.key, { token, lockedUntil: q`${now} + ${leaseMs}::float8 * interval '1 millisecond'` })}
    ), taken as (
      update stepkey.ledger l
         set ${resumedSet(q)},
             attempts = l.attempts + 1,
             expires_at = null,
             updated_at = ${now}
        from line
       where l.scope = ${request.scope} and l.key = ${request.key}
         and l.fingerprint = ${request.fingerprint}
         and ((l.status = 'in_progress' and l.locked_until <= ${now}) or l.status = 'failed')
         and l.status = line.status
         and (l.expires_at is null or l.expires_at > ${now})
         and (select pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0)))
      returning l.attempts, l.root_key, l.version, l.status = 'waiting' as requeued, l.wait_kind, l.wait_step, l.wait_for
    ), back_in_line as (${backInLine(q, request.scope, request.key, 'taken')}
    )
    select attempts, root_key as "rootKey", version, requeued,
           wait_kind as "waitKind", wait_step as "waitStep", wait_for as "waitFor",
           -- In the statement's snapshot: a run in progress keeps the slot it held (back_in_line moves only a failed run's entry).
           (select e.queue from stepkey.queue_entries e where e.scope = ${request.scope} and e.key = ${request.key} and e.holding) as "heldQueue"
      from taken`;
  return rows[0];
}

/** A run's claim takes over with the statement above, and forgets an expired run as any key (expire.ts). */
export const runClaimPaths: ClaimPaths = { takeover: takeOverRun, forget: forgetExpiredRun };
