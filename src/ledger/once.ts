/**
 * `once`: run a function at most once per key, with its writes and its stored
 * outcome in one transaction.
 *
 *   BEGIN
 *     SET LOCAL lock_timeout     (bounds the wait on an uncommitted duplicate)
 *     claim                      (one statement; replay / in progress / mismatch end here)
 *     SAVEPOINT                  (pipelined with the function's first statement)
 *     fn(tx)                     (the caller's business writes)
 *     complete                   (the outcome, as text)
 *   COMMIT
 *
 * A crash before COMMIT leaves nothing; after it, both the writes and the
 * outcome. A deterministic error (retryable === false, or what `storeError`
 * accepts) rolls back to the savepoint — even after a constraint violation
 * aborted the transaction — and is stored and replayed. Any other error rolls
 * everything back and frees the key for the retry.
 */
import type { Sql, TransactionSql, DrizzleTx } from '../db/connect.js';
import { drizzleOn } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { isLockTimeout, translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { assertValidClaim, claimKey } from './claim.js';
import { isNonRetryable, serializeError, toJsonText } from './outcome.js';
import { completeRow } from './sql/finish.js';
import type { ClaimRequest, Lease, LedgerKind, OutcomeToStore, StoredOutcome } from './types.js';

export interface OnceContext {
  /** The claim's transaction (postgres.js): writes here commit with the outcome. */
  sql: TransactionSql;
  /** drizzle on the same transaction. */
  db: DrizzleTx;
  lease: Lease;
  /** 1 on the first attempt; more after takeovers of expired leases. */
  attempts: number;
}

export interface OnceOptions<T> {
  /** The text stored for a success (default: strict JSON of the value). */
  serialize?: (value: T) => string;
  /** A status code stored with a success (an HTTP status, for instance). */
  code?: number | null;
  /**
   * What to store for an error, or undefined to roll everything back, free the
   * key and rethrow. Default: errors with `retryable === false` are stored as
   * JSON `{ name, message, code?, data? }`.
   */
  storeError?: (error: unknown) => OutcomeToStore | undefined;
  /** How long the completed key is kept (default: the ledger's retention). */
  retentionMs?: number;
}

export type OnceResult<T> =
  | { state: 'executed'; ok: true; value: T; outcome: StoredOutcome }
  | { state: 'executed'; ok: false; error: unknown; outcome: StoredOutcome }
  | { state: 'replay'; outcome: StoredOutcome }
  | { state: 'in_progress'; retryAfterMs: number }
  | { state: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

export interface OnceDeps {
  sql: Sql;
  clock: Clock;
  leaseMs: number;
  retentionMs: number;
  lockWaitMs: number;
}

export function defaultStoreError(error: unknown): OutcomeToStore | undefined {
  if (!isNonRetryable(error)) return undefined;
  return { ok: false, body: toJsonText(serializeError(error), 'error') };
}

/** Thrown inside the transaction to end it when the duplicate's wait ran out. */
class StillInProgress extends Error {}

export async function once<T>(
  deps: OnceDeps,
  request: ClaimRequest,
  fn: (context: OnceContext) => Promise<T>,
  options: OnceOptions<T> = {},
): Promise<OnceResult<T>> {
  assertValidClaim(request);
  const serialize = options.serialize ?? ((value: T) => toJsonText(value));
  const storeError = options.storeError ?? defaultStoreError;
  let userError: { error: unknown } | undefined;

  let result: OnceResult<T>;
  try {
    result = await deps.sql.begin(async (tx): Promise<OnceResult<T>> => {
      let claim;
      try {
        // Pipelined with the claim: no extra round trip.
        const bounded = tx.unsafe(`set local lock_timeout = '${Math.max(1, Math.round(deps.lockWaitMs))}ms'`).execute();
        bounded.catch(() => {});
        claim = await claimKey(tx, deps.clock, request, request.leaseMs ?? deps.leaseMs);
        await bounded;
      } catch (error) {
        if (isLockTimeout(error)) throw new StillInProgress();
        throw error;
      }
      if (claim.state !== 'owned') return claim;
      faultPoint('ledger.after-claim', request.name ?? undefined);

      // Pipelined ahead of the function's first statement: no extra round trip.
      const prepared = Promise.all([
        tx.unsafe('set local lock_timeout to default').execute(),
        tx.unsafe('savepoint stepkey_once').execute(),
      ]);
      prepared.catch(() => {});

      let stored: OutcomeToStore;
      let value: T | undefined;
      let caught: { error: unknown } | undefined;
      try {
        value = await fn({ sql: tx, db: drizzleOn(tx), lease: claim.lease, attempts: claim.attempts });
      } catch (error) {
        caught = { error };
      }
      await prepared;
      if (caught) {
        const decided = storeError(caught.error);
        if (!decided) {
          userError = caught;
          throw caught.error;
        }
        await tx.unsafe('rollback to savepoint stepkey_once');
        stored = { ok: false, body: decided.body, code: decided.code ?? null };
      } else {
        stored = { ok: true, body: serialize(value as T), code: options.code ?? null };
      }

      faultPoint('ledger.before-commit', request.name ?? undefined);
      const done = await completeRow(tx, deps.clock, claim.lease, stored, options.retentionMs ?? deps.retentionMs);
      if (!done) throw new StepkeyError('lease_lost', `The key '${request.key}' was taken over before it completed.`);
      const outcome: StoredOutcome = { status: 'completed', ok: stored.ok, body: stored.body, code: stored.code ?? null };
      return caught
        ? { state: 'executed', ok: false, error: caught.error, outcome }
        : { state: 'executed', ok: true, value: value as T, outcome };
    });
  } catch (error) {
    if (error instanceof StillInProgress) return { state: 'in_progress', retryAfterMs: 1000 };
    if (userError && error === userError.error) throw error;
    if (error instanceof StepkeyError) throw error;
    throw translateDatabaseError(error, `running once for key '${request.key}'`);
  }
  if (result.state === 'executed') faultPoint('ledger.after-commit', request.name ?? undefined);
  return result;
}
