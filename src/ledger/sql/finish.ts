/**
 * Fenced writes by the holder of a key: complete, fail, release, heartbeat.
 *
 * Guarantee: each applies only while the caller's lease token is the row's
 * current token and the row is in progress. A holder whose lease was taken
 * over (or whose run was cancelled) changes nothing: it can neither overwrite
 * nor release the new holder's claim.
 *
 * The statements are returned unexecuted (postgres.js queries are lazy), so a
 * transaction can send one together with its COMMIT. `completeStatement`
 * raises SKL01 (lease lost) rather than returning zero rows, because by the
 * time its answer arrives the COMMIT is already on the wire.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { ClaimRequest, Lease, OutcomeToStore } from '../types.js';

/**
 * Stores the outcome. A root row (no parent) expires `retentionMs` after
 * completion; a child row lives as long as its root.
 */
export function completeStatement(q: Queryable, clock: Clock, lease: Lease, outcome: OutcomeToStore, retentionMs: number) {
  const now = sqlNow(q, clock);
  return q`
    with completed as (
      update stepkey.ledger
         set status = 'completed',
             outcome = ${outcome.body},
             outcome_ok = ${outcome.ok},
             outcome_code = ${outcome.code ?? null}::int,
             lease_token = null,
             locked_until = null,
             completed_at = ${now},
             updated_at = ${now},
             expires_at = ${now} + (case when parent_key is null then ${retentionMs}::float8 end) * interval '1 millisecond'
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'
      returning 1
    )
    select stepkey.lease_held(count(*)) from completed`;
}

/**
 * Marks a run failed but resumable: no stored outcome, the last error kept for
 * diagnosis, claimable again with the same fingerprint. It expires after
 * `retentionMs` like a completed one.
 */
export function failStatement(q: Queryable, clock: Clock, lease: Lease, lastError: string, retentionMs: number) {
  const now = sqlNow(q, clock);
  return q`
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
}

/** Gives the key up after a retryable failure (the retry runs afresh). */
export function releaseStatement(q: Queryable, lease: Lease) {
  return q`
    delete from stepkey.ledger
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
}

/** Extends the lease by `leaseMs` from now. */
export function heartbeatStatement(q: Queryable, clock: Clock, lease: Lease, leaseMs: number) {
  const now = sqlNow(q, clock);
  return q`
    update stepkey.ledger
       set locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond'
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
}

/**
 * Writes a key that was never written before, already completed: the end of
 * a `once` that held the key by its advisory lock. A plain INSERT: if the key
 * appeared meanwhile (a holder that committed just as this claim began), the
 * unique violation rolls the whole transaction back, business writes
 * included, and `once` reads the key again.
 */
export function insertCompletedStatement(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  outcome: OutcomeToStore,
  retentionMs: number,
  options: { skipIfPresent?: boolean } = {},
) {
  const now = sqlNow(q, clock);
  const parentKey = request.parentKey ?? null;
  // skipIfPresent: no row (instead of a unique violation) when the key exists — for callers
  // that must not abort the transaction they share with their caller, and that then read again.
  const onConflict = options.skipIfPresent ? q`on conflict (scope, key) do nothing returning 1` : q``;
  return q`
    insert into stepkey.ledger
      (scope, key, kind, name, parent_key, fingerprint, status, outcome, outcome_ok, outcome_code,
       attempts, created_at, updated_at, completed_at, root_key, expires_at)
    values
      (${request.scope}, ${request.key}, ${request.kind ?? 'request'}, ${request.name ?? null}, ${parentKey},
       ${request.fingerprint}, 'completed', ${outcome.body}, ${outcome.ok}, ${outcome.code ?? null}::int,
       1, ${now}, ${now}, ${now}, ${request.rootKey ?? null}::text,
       ${parentKey === null ? q`${now} + ${retentionMs}::float8 * interval '1 millisecond'` : q`null::timestamptz`})
    ${onConflict}`;
}
