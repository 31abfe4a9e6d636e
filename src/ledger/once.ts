/**
 * `once`: run a function at most once per key, with its writes and its stored
 * outcome in one transaction.
 *
 *   BEGIN; claim (lock mode)     one round trip: advisory lock + read of the key
 *   SAVEPOINT                    sent ahead of the function's first statement
 *   fn(tx)                       the caller's business writes
 *   INSERT completed row; COMMIT one round trip
 *
 * The key is held by a transaction-scoped advisory lock, so a duplicate is
 * told "in progress" at once, and the ledger row is written once, finished.
 * A replay, a mismatch or an in-progress answer ends after the first round
 * trip. A crash before COMMIT leaves nothing; after it, both the writes and the
 * outcome. A deterministic error (retryable === false, or what `storeError`
 * accepts) rolls back to the savepoint — even after a constraint violation
 * aborted the transaction — and is stored and replayed. Any other error rolls
 * everything back and frees the key for the retry.
 *
 * Rare paths: a key whose split-form holder's lease expired (or a failed one)
 * is taken over with an UPDATE and completed with another; a key completed by
 * someone else just as this claim began shows up as a unique violation at the
 * final INSERT, which rolls everything back, and the claim is read again.
 */
import type { Sql, DrizzleTx } from '../db/connect.js';
import { drizzleOn } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction, type TxSql } from '../db/transaction.js';
import { isConnectionError, isUniqueViolation, translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { UNCOMMITTED_RETRY_AFTER_MS, assertValidClaim, claimKey } from './claim.js';
import { isNonRetryable, serializeError, toJsonText } from './outcome.js';
import { completeStatement, insertCompletedStatement } from './sql/finish.js';
import type { ClaimRequest, Lease, LedgerKind, OutcomeToStore, StoredOutcome } from './types.js';

export interface OnceContext {
  /** The claim's transaction (postgres.js): writes here commit with the outcome. */
  sql: TxSql;
  /** drizzle on the same transaction. */
  db: DrizzleTx;
  /** 1 on the first attempt; more after takeovers of expired split-form claims. */
  attempts: number;
}

export interface OnceOptions<T> {
  /** The text stored for a success (default: strict JSON of the value). */
  serialize?: (value: T) => string;
  /** A status code stored with a success (an HTTP status, for instance), or one computed from the value. */
  code?: number | null | ((value: T) => number | null);
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
}

export function defaultStoreError(error: unknown): OutcomeToStore | undefined {
  if (!isNonRetryable(error)) return undefined;
  return { ok: false, body: toJsonText(serializeError(error), 'error') };
}

/** How often a claim that lost the race to a concurrent commit is read again. */
const MAX_ATTEMPTS = 3;

export async function once<T>(
  deps: OnceDeps,
  request: ClaimRequest,
  fn: (context: OnceContext) => Promise<T>,
  options: OnceOptions<T> = {},
): Promise<OnceResult<T>> {
  assertValidClaim(request);
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await attemptOnce(deps, request, fn, options);
    } catch (error) {
      if (!(error instanceof LostRace) || attempt >= MAX_ATTEMPTS) {
        throw error instanceof LostRace ? error.cause : error;
      }
    }
  }
}

/** The key was completed by another holder while this attempt ran; everything rolled back. */
class LostRace extends Error {}

async function attemptOnce<T>(
  deps: OnceDeps,
  request: ClaimRequest,
  fn: (context: OnceContext) => Promise<T>,
  options: OnceOptions<T>,
): Promise<OnceResult<T>> {
  const serialize = options.serialize ?? ((value: T) => toJsonText(value));
  const storeError = options.storeError ?? defaultStoreError;
  const label = request.name ?? undefined;

  let transaction: Transaction;
  try {
    transaction = await Transaction.begin(deps.sql);
  } catch (error) {
    throw translateDatabaseError(error, `starting a transaction for key '${request.key}'`);
  }
  const tx = transaction.sql;
  let claim;
  try {
    claim = await claimKey(tx, deps.clock, request, { leaseMs: request.leaseMs ?? deps.leaseMs, mode: 'lock' });
  } catch (error) {
    transaction.abandon();
    throw translateDatabaseError(error, `claiming key '${request.key}'`);
  }
  if (claim.state !== 'owned' && claim.state !== 'vacant') {
    transaction.abandon();
    // A parked run under this key is work in progress, to a `once` as to anyone.
    return claim.state === 'waiting' ? { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS } : claim;
  }
  // A vacant key is written once, finished; a taken-over row is updated under its new lease.
  const lease: Lease | undefined = claim.state === 'owned' ? claim.lease : undefined;
  faultPoint('ledger.after-claim', label);

  let stored: OutcomeToStore;
  let result: OnceResult<T>;
  try {
    const prepared = transaction.pipeline('savepoint stepkey_once');
    let value: T | undefined;
    let caught: { error: unknown } | undefined;
    try {
      value = await fn({ sql: tx, db: drizzleOn(tx), attempts: claim.state === 'owned' ? claim.attempts : 1 });
    } catch (error) {
      caught = { error };
    }
    await prepared;
    if (caught) {
      const decided = storeError(caught.error);
      if (!decided) {
        await transaction.rollback();
        // A connection that died under the function is Postgres's failure, not the caller's.
        throw isConnectionError(caught.error)
          ? translateDatabaseError(caught.error, `running once for key '${request.key}'`)
          : caught.error;
      }
      await tx.unsafe('rollback to savepoint stepkey_once');
      stored = { ok: false, body: decided.body, code: decided.code ?? null };
    } else {
      const code = typeof options.code === 'function' ? options.code(value as T) : (options.code ?? null);
      stored = { ok: true, body: serialize(value as T), code };
    }
    const outcome: StoredOutcome = { status: 'completed', ok: stored.ok, body: stored.body, code: stored.code ?? null };
    result = caught
      ? { state: 'executed', ok: false, error: caught.error, outcome }
      : { state: 'executed', ok: true, value: value as T, outcome };
  } catch (error) {
    await transaction.rollback();
    throw error;
  }

  faultPoint('ledger.before-commit', label);
  const retentionMs = options.retentionMs ?? deps.retentionMs;
  try {
    await transaction.commit(
      lease
        ? completeStatement(tx, deps.clock, lease, stored, retentionMs)
        : insertCompletedStatement(tx, deps.clock, request, stored, retentionMs),
    );
  } catch (error) {
    if (isUniqueViolation(error)) throw new LostRace('key completed concurrently', { cause: error });
    if (error instanceof StepkeyError) throw error;
    throw translateDatabaseError(error, `storing the outcome of key '${request.key}'`);
  }
  faultPoint('ledger.after-commit', label);
  return result;
}
