/**
 * A running run's lease: extended by its process's heartbeat, ended at once
 * when the process lets the run go (a graceful shutdown, a conflict), and
 * measured again from the wall clock when a run's first commit carries a
 * start that waited. Each is fenced by the lease token: a lease taken over
 * or cancelled is never written by its old holder.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { Lease } from '../ledger/types.js';

/**
 * Extends every lease this process holds, in one statement. Returns the ones
 * still held; a lease missing from the answer was taken over or cancelled.
 */
export async function heartbeatRuns(q: Queryable, clock: Clock, leases: readonly Lease[], leaseMs: number) {
  const now = sqlNow(q, clock);
  return q<{ scope: string; key: string }[]>`
    update stepkey.ledger l
       set locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond'
      from json_to_recordset(${JSON.stringify(leases)}::json) as h(scope text, key text, token uuid)
     where l.scope = h.scope and l.key = h.key and l.lease_token = h.token and l.status = 'in_progress'
    returning l.scope, l.key`;
}

/** Ends a lease now (graceful shutdown), so that any worker's sweeper resumes the run at once. */
export async function expireRunLease(q: Queryable, clock: Clock, lease: Lease): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set locked_until = ${now}
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}

/**
 * Extends a lease measured from the wall clock (statement_timestamp(): this
 * statement's start, not the transaction's): for a transaction that has been
 * open a while, such as a run's first step carrying the run's start. Stable,
 * not volatile, so that Citus evaluates it once and sends the update to the
 * scope's node.
 */
export function refreshRunLeaseStatement(q: Queryable, clock: Clock, lease: Lease, leaseMs: number) {
  return q`
    update stepkey.ledger
       set locked_until = statement_timestamp() + ${clock.offsetMs + leaseMs}::float8 * interval '1 millisecond'
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'`;
}
