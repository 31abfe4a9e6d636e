/**
 * Claim: a run comes into being, or a call learns what its key already is.
 * A run's claim is the ledger's claim of a key (ledger/claim.ts: one
 * statement that inserts the run as running under a new lease, or reads the
 * row already there) with a run's own rare paths: a lease that ran out or a
 * failed run is taken over — a failed run on a queue going back in line for
 * a slot — and an expired run is forgotten with everything under it
 * (take-over.ts, expire.ts).
 */
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { claimKey, claimStatement, claimVacantKey, type LockingClaimResult } from '../ledger/claim.js';
import type { ClaimRequest, ClaimResult } from '../ledger/types.js';
import { runClaimPaths } from './take-over.js';

/** Claims a run (the split form: the claim commits on its own, or `lock`: by advisory lock only). */
export function claimRun(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number; mode?: 'insert' }): Promise<ClaimResult>;
export function claimRun(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number; mode: 'lock' }): Promise<LockingClaimResult>;
export function claimRun(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number; mode?: 'insert' | 'lock' }): Promise<LockingClaimResult> {
  return claimKey(q, clock, request, { ...options, paths: runClaimPaths } as never);
}

/** Claims a run the probe found vacant, in the caller's transaction (the run's start folded into its first commit). */
export function claimVacantRun(q: Queryable, clock: Clock, request: ClaimRequest, options: { leaseMs: number }): Promise<ClaimResult> {
  return claimVacantKey(q, clock, request, { ...options, paths: runClaimPaths });
}

/**
 * A run's claim as one statement to pipeline (an enqueue's, sent with its
 * entry: flow/enqueue.ts): it answers a new run, a replay, a run in progress
 * or parked, a mismatch; for the rest (a takeover, an expired key) the caller
 * makes the full claim (claimRun) in a transaction of its own.
 */
export const runClaimStatement = claimStatement;
