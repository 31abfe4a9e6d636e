/**
 * Retry policies of steps: how many attempts, how long to wait between them,
 * and how long a `call` step may take before it is aborted.
 */
import { StepkeyError } from '../errors/stepkey-error.js';

export interface RetryPolicy {
  /** Attempts in all, the first included (default 3). */
  attempts?: number;
  /** Wait before the second attempt (default 100 ms). */
  initialDelayMs?: number;
  /** Multiplier per further attempt (default 2). */
  factor?: number;
  /** Upper bound of one wait (default 5 s). */
  maxDelayMs?: number;
}

export interface ResolvedRetryPolicy {
  attempts: number;
  initialDelayMs: number;
  factor: number;
  maxDelayMs: number;
}

export const defaultRetryPolicy: ResolvedRetryPolicy = {
  attempts: 3,
  initialDelayMs: 100,
  factor: 2,
  maxDelayMs: 5_000,
};

/** Default time a `call` step may take (30 s). */
export const DEFAULT_STEP_TIMEOUT_MS = 30_000;

export function resolveRetryPolicy(policy: RetryPolicy | undefined, where: string): ResolvedRetryPolicy {
  const resolved = { ...defaultRetryPolicy, ...policy };
  const check = (name: keyof ResolvedRetryPolicy, min: number) => {
    const value = resolved[name];
    if (!Number.isFinite(value) || value < min) {
      throw new StepkeyError('definition_error', `${where}: retry.${name} must be a number ≥ ${min}, got ${value}.`);
    }
  };
  check('attempts', 1);
  check('initialDelayMs', 0);
  check('factor', 1);
  check('maxDelayMs', 0);
  if (!Number.isInteger(resolved.attempts)) {
    throw new StepkeyError('definition_error', `${where}: retry.attempts must be a whole number.`);
  }
  return resolved;
}

/** The wait after attempt `attempt` (1-based) failed, with ±20 % jitter. */
export function backoffDelay(policy: ResolvedRetryPolicy, attempt: number): number {
  const base = Math.min(policy.maxDelayMs, policy.initialDelayMs * policy.factor ** (attempt - 1));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}
