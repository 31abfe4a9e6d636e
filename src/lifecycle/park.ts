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

/** A tagged template that builds SQL: a postgres.js query's (a fragment) or a StatementText's (appended). */
type SqlTag<T> = (strings: TemplateStringsArray, ...values: unknown[]) => T;

/**
 * What a park sets: the run `waiting` with its wait, no lease, no expiry.
 * Its wait's own end is `wait_until`; any sweeper may take it at `wake_at`,
 * the earlier of that and the run's deadline (computed here, from the row).
 * `now`: stepkey's now, as `tag` splices it.
 */
export function parkSet<T>(tag: SqlTag<T>, now: unknown, wait: RunWait): T {
  return tag`
             status = 'waiting',
             wait_kind = ${wait.kind},
             wait_step = ${wait.step},
             wait_for = ${wait.for}::text,
             wait_until = to_timestamp(${wait.untilMs}::float8 / 1000),
             wake_at = least(to_timestamp(${wait.untilMs}::float8 / 1000), deadline_at),
             lease_token = null,
             locked_until = null,
             expires_at = null,
             updated_at = ${now}`;
}

/**
 * Park: the run becomes `waiting` (parkSet). What it holds is given back
 * (holds.ts): a queue slot — unless it parks for one — and its limit slots.
 * Guarantee: only by the lease holder (SKL01 otherwise), as the last write of
 * the transaction that records everything the run did before it (the step
 * rows before it are fenced by the same, still valid, lease).
 * (An enqueue parks the run its claim inserted in its entry's statement:
 * flow/sql/enqueue.ts.)
 */
export function parkStatement(q: Queryable, clock: Clock, lease: Lease, wait: RunWait) {
  const b = new StatementText();
  const now = b.now(clock);
  b.sql`
    with moved as (
      update stepkey.ledger
         set`;
  parkSet((strings, ...values) => b.sql(strings, ...values), now, wait);
  b.sql`
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'
      returning scope, key
    )`;
  const holds = wait.kind !== 'slot';
  if (holds) giveBackHolds(b, lease, 'park');
  b.sql`
    select stepkey.lease_held((select count(*) from moved))${new SqlText(holds ? `, ${holdsRead} as woken` : '')}`;
  return b.query(q);
}
