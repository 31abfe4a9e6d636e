/**
 * Parking a run, and the lock a wait takes before it decides.
 *
 * A wait decides whether to park by reading something another transaction
 * may be changing: a mailbox that `send` writes, a child run that is
 * finishing. Both wakers lock the waiting run's row before they write and
 * mark it due only if it is parked. So a wait first locks its own run's row
 * (lockRunStatement), then reads, in a later statement with a fresh snapshot:
 * a waker that came first has committed by then and its write is seen; one
 * that comes later waits for the lock, finds the run parked and marks it
 * due. A wake-up is never lost between the read and the park.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { Lease } from '../ledger/types.js';
import type { RunWait } from './wait.js';

/**
 * Locks the run's row for the rest of the transaction, fenced by the lease
 * (SKL01 when the lease is gone), and reads stepkey's now (ms) — from the wall
 * clock, not the transaction's start: the transaction may carry a tx step
 * that ran a while, and a timer counts from when the wait is reached.
 */
export function lockRunStatement(q: Queryable, clock: Clock, lease: Lease) {
  return q<{ held: boolean; now_ms: number }[]>`
    select stepkey.lease_held(count(*)) as held,
           (extract(epoch from clock_timestamp() + ${clock.offsetMs}::float8 * interval '1 millisecond') * 1000)::float8 as now_ms
      from (select 1 from stepkey.ledger
             where scope = ${lease.scope} and key = ${lease.key}
               and lease_token = ${lease.token}::uuid and status = 'in_progress'
               for update) as run`;
}

/**
 * Parks the run: status `waiting` with its wait, no lease, no expiry.
 * Guarantee: only by the lease holder (SKL01 otherwise), as the last write of
 * the transaction that records everything the run did before it (the step
 * rows before it are fenced by the same, still valid, lease).
 */
export function parkStatement(q: Queryable, clock: Clock, lease: Lease, wait: RunWait) {
  const now = sqlNow(q, clock);
  return q`
    with parked as (
      update stepkey.ledger
         set status = 'waiting',
             wait_kind = ${wait.kind},
             wait_step = ${wait.step},
             wait_for = ${wait.for}::text,
             wake_at = case when ${wait.wakeAtMs}::float8 is null then null
                            else to_timestamp(${wait.wakeAtMs}::float8 / 1000) end,
             lease_token = null,
             locked_until = null,
             expires_at = null,
             updated_at = ${now}
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'
      returning 1
    )
    select stepkey.lease_held(count(*)) from parked`;
}
