/**
 * Claiming a key: the claim statement, plus the rare paths it can lead to —
 * forgetting an expired key, taking over an expired lease or a failed run, and
 * reading again when a concurrent commit slipped past the statement's
 * snapshot.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import { isLegacyFingerprint } from '../keys/fingerprint.js';
import { claimRow } from './sql/claim.js';
import { forgetExpiredRow, takeoverRow } from './sql/takeover.js';
import type { ClaimRequest, ClaimResult } from './types.js';

/** How many times a claim reads again before it answers "in progress". */
const MAX_ROUNDS = 4;

/** Retry-After for a key whose holder has not committed its claim yet. */
export const UNCOMMITTED_RETRY_AFTER_MS = 1000;

export function assertValidClaim(request: ClaimRequest): void {
  assertValidScope(request.scope);
  assertValidKey(request.key);
  if (typeof request.fingerprint !== 'string' || request.fingerprint.length === 0) {
    throw new StepkeyError('invalid_input', 'A claim needs a non-empty fingerprint.');
  }
}

/** In `lock` mode a claim may also find the key vacant: no row, and the caller holds its advisory lock. */
export type LockingClaimResult = ClaimResult | { state: 'vacant' };

export interface ClaimOptions {
  leaseMs: number;
  /** `insert` (default) writes the claim; `lock` holds the key by advisory lock only (see sql/claim.ts). */
  mode?: 'insert' | 'lock';
}

export async function claimKey(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  options: ClaimOptions & { mode?: 'insert' },
): Promise<ClaimResult>;
export async function claimKey(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  options: ClaimOptions & { mode: 'lock' },
): Promise<LockingClaimResult>;
export async function claimKey(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  options: ClaimOptions,
): Promise<LockingClaimResult> {
  const { leaseMs, mode = 'insert' } = options;
  let legacyTried = false;
  for (let round = 0; round < MAX_ROUNDS; round += 1) {
    const token = randomUUID();
    const row = await claimRow(q, clock, request, token, leaseMs, mode);
    if (!row) continue; // committed after our snapshot: read again
    const lease = { scope: request.scope, key: request.key, token };
    const existing = { rootKey: row.root_key, version: row.version };
    switch (row.state) {
      case 'vacant':
        return { state: 'vacant' };
      case 'owned':
        return { state: 'owned', lease, attempts: row.attempts, resumed: false, rootKey: request.rootKey ?? null };
      case 'mismatch': {
        // A row stored under an older fingerprint version is compared the way it was computed.
        const legacy = !legacyTried && isLegacyFingerprint(row.stored_fingerprint) ? request.legacyFingerprint?.() : undefined;
        if (legacy !== undefined && legacy === row.stored_fingerprint) {
          legacyTried = true;
          request = { ...request, fingerprint: legacy };
          continue;
        }
        return { state: 'mismatch', existing: { kind: row.kind ?? 'request', name: row.name } };
      }
      case 'replay':
        return {
          state: 'replay',
          outcome: {
            status: row.status === 'cancelled' ? 'cancelled' : 'completed',
            ok: row.outcome_ok ?? false,
            body: row.outcome ?? '',
            code: row.outcome_code,
          },
          ...existing,
        };
      case 'in_progress':
        return { state: 'in_progress', retryAfterMs: row.retry_after_ms ?? 0, ...existing };
      case 'waiting':
        return {
          state: 'waiting',
          wait: { kind: row.wait_kind ?? '', step: row.wait_step ?? '', for: row.wait_for, wakeAtMs: row.wake_at_ms },
          ...existing,
        };
      case 'locked':
        // Held by a transaction that has not committed its claim yet.
        return { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS };
      case 'expired':
        // Forgotten under the key's advisory lock, which a lock-mode caller then holds.
        if ((await forgetExpiredRow(q, clock, request.scope, request.key)) && mode === 'lock') return { state: 'vacant' };
        continue;
      case 'lease_expired':
      case 'resumable': {
        const taken = await takeoverRow(q, clock, request, token, leaseMs);
        if (taken?.requeued) {
          // A failed run on a queue: resumed, but waiting for a slot (see sql/takeover.ts).
          return {
            state: 'waiting',
            wait: { kind: taken.waitKind ?? 'slot', step: taken.waitStep ?? '', for: taken.waitFor, wakeAtMs: null },
            resumed: true,
            rootKey: taken.rootKey,
            version: taken.version,
          };
        }
        if (taken) return { state: 'owned', lease, attempts: taken.attempts, resumed: true, rootKey: taken.rootKey };
        continue; // another contender changed it first: read again
      }
    }
  }
  // The key kept changing under us: someone else is working on it.
  return { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS };
}
