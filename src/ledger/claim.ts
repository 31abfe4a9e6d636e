/**
 * Claiming a key: the claim statement, plus the rare paths it can lead to —
 * forgetting an expired key, taking over an expired lease or a failed run, and
 * reading again when a concurrent commit slipped past the statement's
 * snapshot.
 */
import { randomUUID } from 'node:crypto';
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertStorableText, assertValidKey, assertValidScope } from '../keys/validate.js';
import { isLegacyFingerprint } from '../keys/fingerprint.js';
import { claimRow, claimRowStatement, insertClaimRow, probeRow, type ClaimRow, type InsertedClaim } from './sql/claim.js';
import { forgetExpiredRow, takeoverRow } from './sql/takeover.js';
import type { ClaimKind, ClaimRequest, ClaimResult } from './types.js';

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
  assertStorableText(request.fingerprint, "A claim's fingerprint");
  if (typeof request.name === 'string') assertStorableText(request.name, "A claim's name");
  if (typeof request.parentKey === 'string') assertStorableText(request.parentKey, "A claim's parentKey");
  if (request.kind !== undefined && !claimKinds.has(request.kind)) {
    throw new StepkeyError(
      'invalid_input',
      `A claim's kind is request, run or effect, not ${JSON.stringify(request.kind)}` +
        (request.kind === ('step' as string) ? " (a run's steps are recorded by the engine, in stepkey.steps)." : '.'),
    );
  }
}

const claimKinds = new Set<string>(['request', 'run', 'effect'] satisfies ClaimKind[]);

/** In `lock` mode a claim may also find the key vacant: no row, and the caller holds its advisory lock. */
export type LockingClaimResult = ClaimResult | { state: 'vacant' };

/**
 * The rare paths of a claim, for keys whose life is more than the ledger's: a
 * run's claim takes over (a failed run on a queue goes back in line) and
 * forgets (its steps, mailbox and children go with it) with the lifecycle's
 * statements (lifecycle/take-over.ts).
 */
export interface ClaimPaths {
  takeover: typeof takeoverRow;
  forget: typeof forgetExpiredRow;
}

const keyPaths: ClaimPaths = { takeover: takeoverRow, forget: forgetExpiredRow };

export interface ClaimOptions {
  leaseMs: number;
  /** How an expired key is forgotten and a lease taken over (default: a key's own, with nothing under it but keys). */
  paths?: ClaimPaths;
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
  const { leaseMs, mode = 'insert', paths = keyPaths } = options;
  let legacyTried = false;
  for (let round = 0; round < MAX_ROUNDS; round += 1) {
    const token = randomUUID();
    const row = await claimRow(q, clock, request, token, leaseMs, mode);
    if (!row) continue; // committed after our snapshot: read again
    const lease = { scope: request.scope, key: request.key, token };
    switch (row.state) {
      case 'vacant':
        return { state: 'vacant' };
      case 'owned':
        return { state: 'owned', lease, attempts: row.attempts, resumed: false, rootKey: request.rootKey ?? null, deadlineAtMs: row.deadline_at_ms };
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
      case 'in_progress':
      case 'waiting':
        return settledBy(row, row.state);
      case 'locked':
        // Held by a transaction that has not committed its claim yet.
        return { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS };
      case 'expired':
        // Forgotten under the key's advisory lock, which a lock-mode caller then holds.
        if ((await paths.forget(q, clock, request.scope, request.key)) && mode === 'lock') return { state: 'vacant' };
        continue;
      case 'lease_expired':
      case 'resumable': {
        const taken = await paths.takeover(q, clock, request, token, leaseMs);
        if (taken?.requeued) {
          // A failed run on a queue: resumed, but waiting for a slot (see sql/takeover.ts).
          return {
            state: 'waiting',
            wait: { kind: taken.waitKind ?? 'slot', step: taken.waitStep ?? '', for: taken.waitFor, untilMs: null },
            resumed: true,
            rootKey: taken.rootKey,
            version: taken.version,
          };
        }
        if (taken) return { state: 'owned', lease, attempts: taken.attempts, resumed: true, rootKey: taken.rootKey, ...(taken.heldQueue ? { heldQueue: taken.heldQueue } : {}) };
        continue; // another contender changed it first: read again
      }
    }
  }
  // The key kept changing under us: someone else is working on it.
  return { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS };
}

/** A claim's answer that writes nothing: a replay, in progress, a parked run, a mismatch. */
export type SettledClaim = Exclude<ClaimResult, { state: 'owned' }>;

/** The answer of a row that settles a claim without writing: a replay, a run in progress, a parked run. */
function settledBy(row: ClaimRow, state: 'replay' | 'in_progress' | 'waiting'): SettledClaim {
  const existing = { rootKey: row.root_key, version: row.version };
  switch (state) {
    case 'replay':
      return {
        state: 'replay',
        outcome: {
          status: row.status === 'cancelled' || row.status === 'deadline_exceeded' ? row.status : 'completed',
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
        wait: { kind: row.wait_kind ?? '', step: row.wait_step ?? '', for: row.wait_for, untilMs: row.wait_until_ms },
        ...existing,
      };
  }
}

/**
 * The answer of the key's committed row, when it settles the call — a replay,
 * a mismatch, a run in progress or parked — read in one statement outside any
 * transaction (see sql/claim.ts, probeRow). Undefined when there is no row,
 * or one to take over or forget, or one stored under an older fingerprint
 * version: the caller claims the key then.
 */
export async function probeKey(q: Queryable, clock: Clock, request: ClaimRequest): Promise<SettledClaim | undefined> {
  return settledAnswer(await probeRow(q, clock, request));
}

/**
 * The answer of a committed row that settles the call without writing — a
 * replay, a run in progress or parked, a mismatch — or undefined (no row, a
 * row to claim, or a mismatch under an older fingerprint version: claimed then).
 */
function settledAnswer(row: ClaimRow | undefined): SettledClaim | undefined {
  switch (row?.state) {
    case 'replay':
    case 'in_progress':
    case 'waiting':
      return settledBy(row, row.state);
    case 'mismatch':
      return isLegacyFingerprint(row.stored_fingerprint) ? undefined : { state: 'mismatch', existing: { kind: row.kind ?? 'request', name: row.name } };
    default:
      return undefined;
  }
}

/**
 * The claim of a key the probe found vacant, in the caller's transaction:
 * the in-progress row inserted at once under the key's advisory lock, or,
 * when anyone got there first, the full claim, which answers for them.
 */
export async function claimVacantKey(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number; paths?: ClaimPaths }): Promise<ClaimResult> {
  const token = randomUUID();
  const inserted = await insertClaimRow(q, clock, request, token, options.leaseMs);
  if (!inserted) return claimKey(q, clock, request, options);
  return vacantClaimOwned(request, token, inserted);
}

/**
 * A claim's first statement, not sent yet, for a transaction that sends it
 * with what follows in one round trip (those statements find the run by its
 * lease token, and write nothing when the claim did not insert it).
 * `answer` reads it: the run inserted (owned), a replay, a run in progress or
 * parked, a mismatch — or undefined for the rare paths (a key to forget or
 * take over, a row under an older fingerprint, a commit that slipped past
 * the snapshot): the caller then makes the full claim (claimKey) in a
 * transaction of its own.
 */
export function claimStatement(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number }) {
  assertValidClaim(request);
  const token = randomUUID();
  return {
    token,
    statement: claimRowStatement(q, clock, request, token, options.leaseMs, true) as unknown as postgres.PendingQuery<postgres.Row[]>,
    answer: (rows: readonly unknown[] | undefined): ClaimResult | undefined => {
      const row = rows?.[0] as ClaimRow | undefined;
      if (row?.state === 'owned') return vacantClaimOwned(request, token, row);
      if (row?.state === 'locked') return { state: 'in_progress', retryAfterMs: UNCOMMITTED_RETRY_AFTER_MS };
      return settledAnswer(row);
    },
  };
}

function vacantClaimOwned(request: ClaimRequest, token: string, inserted: InsertedClaim): ClaimResult {
  return {
    state: 'owned',
    lease: { scope: request.scope, key: request.key, token },
    attempts: inserted.attempts,
    resumed: false,
    rootKey: request.rootKey ?? null,
    deadlineAtMs: inserted.deadline_at_ms,
  };
}
