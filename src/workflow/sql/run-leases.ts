/**
 * Leases of running runs: heartbeats, release on shutdown, and the sweeper
 * that takes over runs whose process died.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { Lease } from '../../ledger/types.js';

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

export interface SweptRun {
  scope: string;
  key: string;
  token: string;
  attempts: number;
}

/**
 * The sweeper's takeover: runs whose lease expired get a new lease token and
 * belong to this process. Guarantee: each expired run goes to exactly one
 * sweeper — rows another sweeper is taking are skipped (SKIP LOCKED), and the
 * new token fences out the process that died (or stalled) holding the old one.
 * Failed runs are not touched: they resume when their caller retries.
 */
export async function sweepExpiredRuns(q: Queryable, clock: Clock, limit: number, leaseMs: number) {
  const now = sqlNow(q, clock);
  return q<SweptRun[]>`
    with expired as (
      select scope, key
        from stepkey.ledger
       where kind = 'run' and status = 'in_progress' and locked_until <= ${now}
       order by locked_until
       limit ${limit}
       for update skip locked
    )
    update stepkey.ledger l
       set lease_token = gen_random_uuid(),
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = l.attempts + 1,
           updated_at = ${now}
      from expired e
     where l.scope = e.scope and l.key = e.key
    returning l.scope, l.key, l.lease_token::text as token, l.attempts`;
}
