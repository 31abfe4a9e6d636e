/**
 * The ledger: one table of keys, each claimed once and completed once.
 *
 * Two ways to use it:
 *   - `once(request, fn)`: the claim, the caller's writes and the outcome in
 *     one transaction (see once.ts).
 *   - the split form, for work that must not hold a transaction open (calls to
 *     other services, long workflows): `claim` commits at once, the work runs,
 *     then `complete` — or `release`/`fail` — commits the end, each fenced by
 *     the lease token the claim returned. A holder whose lease expired and was
 *     taken over can no longer write.
 */
import type { Sql } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidClaim, claimKey } from './claim.js';
import { once, type OnceContext, type OnceOptions, type OnceResult } from './once.js';
import { toJsonText, serializeError } from './outcome.js';
import { completeStatement, failStatement, heartbeatStatement, releaseStatement } from './sql/finish.js';
import { isLeaseLost } from '../errors/pg-errors.js';
import { purgeExpiredRows } from './sql/purge.js';
import { readRow, type LedgerRow } from './sql/read.js';
import type { ClaimRequest, ClaimResult, KeyRef, Lease, OutcomeToStore } from './types.js';

export interface LedgerOptions {
  /** postgres.js pool. */
  sql: Sql;
  /** The clock tests move; defaults to the real one. */
  clock?: Clock;
  /** How long a claim is held before another attempt may take it over (default 30 s). */
  leaseMs?: number;
  /** How long a completed key is kept (default 24 h). */
  retentionMs?: number;
}

export const DEFAULT_LEASE_MS = 30_000;
export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new StepkeyError('invalid_options', `${name} must be a positive number of milliseconds, got ${value}.`);
  }
  return value;
}

export class Ledger {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly retentionMs: number;

  constructor(options: LedgerOptions) {
    this.sql = options.sql;
    this.clock = options.clock ?? systemClock;
    this.leaseMs = positive('leaseMs', options.leaseMs, DEFAULT_LEASE_MS);
    this.retentionMs = positive('retentionMs', options.retentionMs, DEFAULT_RETENTION_MS);
  }

  /** Claims a key and commits the claim (split form). */
  async claim(request: ClaimRequest): Promise<ClaimResult> {
    assertValidClaim(request);
    return this.#db(`claiming key '${request.key}'`, () =>
      claimKey(this.sql, this.clock, request, { leaseMs: request.leaseMs ?? this.leaseMs }),
    );
  }

  /** Stores the outcome if `lease` is still current; false if it was taken over. */
  complete(lease: Lease, outcome: OutcomeToStore, options: { retentionMs?: number } = {}): Promise<boolean> {
    return this.#db(`completing key '${lease.key}'`, async () => {
      try {
        await completeStatement(this.sql, this.clock, lease, outcome, options.retentionMs ?? this.retentionMs);
        return true;
      } catch (error) {
        if (isLeaseLost(error)) return false;
        throw error;
      }
    });
  }

  /** Stores a success: `value` as strict JSON text. */
  async completeWith(lease: Lease, value: unknown, code: number | null = null): Promise<boolean> {
    return this.complete(lease, { ok: true, body: toJsonText(value), code });
  }

  /** Frees the key after a retryable failure, if `lease` is still current. */
  release(lease: Lease): Promise<boolean> {
    return this.#db(`releasing key '${lease.key}'`, async () => (await releaseStatement(this.sql, lease)).length === 1);
  }

  /** Marks the key failed but resumable (a run that used up its retries). */
  async fail(lease: Lease, error: unknown): Promise<boolean> {
    const lastError = toJsonText(serializeError(error), 'error');
    return this.#db(
      `failing key '${lease.key}'`,
      async () => (await failStatement(this.sql, this.clock, lease, lastError, this.retentionMs)).length === 1,
    );
  }

  /** Extends the lease; false if it is no longer this holder's. */
  heartbeat(lease: Lease, leaseMs = this.leaseMs): Promise<boolean> {
    return this.#db(
      `extending the lease of '${lease.key}'`,
      async () => (await heartbeatStatement(this.sql, this.clock, lease, leaseMs)).length === 1,
    );
  }

  once<T>(request: ClaimRequest, fn: (context: OnceContext) => Promise<T>, options?: OnceOptions<T>): Promise<OnceResult<T>> {
    return once(this, request, fn, options);
  }

  /** Deletes expired keys in batches until none is left or `maxBatches` ran. */
  async purge(options: { batchSize?: number; maxBatches?: number } = {}): Promise<{ roots: number; children: number }> {
    const batchSize = positive('batchSize', options.batchSize, 500);
    const total = { roots: 0, children: 0 };
    for (let batch = 0; batch < (options.maxBatches ?? Number.POSITIVE_INFINITY); batch += 1) {
      const done = await this.#db('purging expired keys', () => purgeExpiredRows(this.sql, this.clock, batchSize));
      total.roots += done.roots;
      total.children += done.children;
      if (done.roots < batchSize) break;
    }
    return total;
  }

  /** The row of a key, for inspection. */
  get(ref: KeyRef): Promise<LedgerRow | undefined> {
    return this.#db(`reading key '${ref.key}'`, () => readRow(this.sql, ref));
  }

  async #db<T>(action: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      throw translateDatabaseError(error, action);
    }
  }
}
