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
import type { Clock } from '../db/clock.js';
import { SqlText, StatementText } from '../db/statement-text.js';
import { giveBackHolds, holdsRead } from './holds.js';
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
 * Park: the run becomes `waiting` with its wait, no lease, no expiry. Its
 * wait's own end is `wait_until`; any sweeper may take it at `wake_at`, the
 * earlier of that and the run's deadline (computed here, from the row). What
 * it holds is given back (holds.ts): a queue slot — unless it parks for one
 * — and its limit slots.
 * Guarantee: only by the lease holder (SKL01 otherwise), as the last write of
 * the transaction that records everything the run did before it (the step
 * rows before it are fenced by the same, still valid, lease).
 */
export function parkStatement(q: Queryable, clock: Clock, lease: Lease, wait: RunWait, options: { claimedHere?: boolean } = {}) {
  const b = new StatementText();
  const now = b.now(clock);
  b.sql`
    with moved as (
      update stepkey.ledger
         set status = 'waiting',
             wait_kind = ${wait.kind},
             wait_step = ${wait.step},
             wait_for = ${wait.for}::text,
             wait_until = to_timestamp(${wait.untilMs}::float8 / 1000),
             wake_at = least(to_timestamp(${wait.untilMs}::float8 / 1000), deadline_at),
             lease_token = null,
             locked_until = null,
             expires_at = null,
             updated_at = ${now}
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'`;
  // An enqueue that granted its run a slot at once (flow/sql/enqueue.ts) leaves it executing under its claim's lease.
  if (options.claimedHere) {
    b.sql`
         and not exists (select 1 from stepkey.queue_entries e where e.scope = ${lease.scope} and e.key = ${lease.key} and e.holding)`;
  }
  b.sql`
      returning scope, key
    )`;
  const holds = wait.kind !== 'slot';
  if (holds) giveBackHolds(b, lease, 'park');
  if (options.claimedHere) {
    // The run an enqueue's claim inserted in this same transaction (flow/enqueue.ts), sent with that
    // claim: nothing to fence (no one else can have touched a row this transaction inserted), and
    // nothing moves when the claim inserted nothing.
    b.sql`
    select count(*)::int as parked from moved`;
    return b.query(q);
  }
  b.sql`
    select stepkey.lease_held((select count(*) from moved))${new SqlText(holds ? `, ${holdsRead} as woken` : '')}`;
  return b.query(q);
}
