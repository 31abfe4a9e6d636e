/**
 * Fenced writes by the holder of a key: complete, fail, release, heartbeat.
 *
 * Guarantee: each applies only while the caller's lease token is the row's
 * current token and the row is in progress. A holder whose lease was taken
 * over (or whose run was cancelled) gets `false` and has changed nothing: it
 * can neither overwrite nor release the new holder's claim.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { Lease, OutcomeToStore } from '../types.js';


/**
 * Stores the outcome. A root row (no parent) expires `retentionMs` after
 * completion; a child row lives as long as its root.
 */
export async function completeRow(
  q: Queryable,
  clock: Clock,
  lease: Lease,
  outcome: OutcomeToStore,
  retentionMs: number,
  status: 'completed' | 'cancelled' = 'completed',
): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set status = ${status},
           outcome = ${outcome.body},
           outcome_ok = ${outcome.ok},
           outcome_code = ${outcome.code ?? null}::int,
           lease_token = null,
           locked_until = null,
           completed_at = ${now},
           updated_at = ${now},
           expires_at = case when parent_key is null
                             then ${now} + ${retentionMs}::float8 * interval '1 millisecond' end
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}

/**
 * Marks a run failed but resumable: no stored outcome, the last error kept for
 * diagnosis, claimable again with the same fingerprint. It expires after
 * `retentionMs` like a completed one.
 */
export async function failRow(
  q: Queryable,
  clock: Clock,
  lease: Lease,
  lastError: string,
  retentionMs: number,
): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set status = 'failed',
           last_error = ${lastError},
           lease_token = null,
           locked_until = null,
           updated_at = ${now},
           expires_at = ${now} + ${retentionMs}::float8 * interval '1 millisecond'
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}

/** Gives the key up after a retryable failure (the retry runs afresh). */
export async function releaseRow(q: Queryable, lease: Lease): Promise<boolean> {
  const rows = await q`
    delete from stepkey.ledger
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}

/** Extends the lease by `leaseMs` from now. */
export async function heartbeatRow(q: Queryable, clock: Clock, lease: Lease, leaseMs: number): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond'
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}
