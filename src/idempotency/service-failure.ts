/**
 * The one mapping from a StepkeyError to what a keyed call answers. Idempotent
 * procedures, workflow procedures, createWorkflowRouter and stepkey/http's
 * handlers and workflow routes all answer through it, so the same failure
 * gets the same answer everywhere.
 *
 * Guarantees:
 * - The status is the error code's own (stepkey-error.ts holds that table):
 *   400, 404, 409, 422, 500, 502, 503 or 504.
 * - A retryable error carries Retry-After, so that the client retries with the
 *   same key: 503 when the database is unavailable or the process is shutting
 *   down, 409 when a run's lease was taken over (the run continues elsewhere,
 *   and the retry gets its answer).
 * - A database failure never shows the driver's message (host, port, SQL) to
 *   the caller; the StepkeyError stays the refusal's `cause`, for the server's
 *   own error hooks and log.
 * - A failed run (retries used up, a bug) and a database error answer a fixed
 *   message with an error id, never the step's own message; the full error is
 *   logged with the id (internal-failure.ts).
 */
import type { StepkeyError, StepkeyErrorCode } from '../errors/stepkey-error.js';
import { defaultLogger } from '../log/logger.js';
import { instrument } from '../telemetry/instrumentation.js';
import { internalFailure, type ErrorReport } from './internal-failure.js';
import { Refusal } from './refusal.js';

/** Codes whose message is internal (a step's error, the driver's): answered with an error id instead. */
const internalCodes = new Set<StepkeyErrorCode>(['run_failed', 'database_error']);

/** Seconds a caller is asked to wait before retrying after a retryable error. */
const RETRY_AFTER_SECONDS = '1';

/** Messages that replace the error's own, which names internals the caller must not see. */
const publicMessages: Partial<Record<StepkeyErrorCode, string>> = {
  database_unavailable: `The database is unavailable; retry after ${RETRY_AFTER_SECONDS} s.`,
  not_migrated: "The database has no stepkey tables yet: run `stepkey migrate` against it (the server log has the details).",
  lease_lost: `The operation for this key was taken over and continues in another process; retry after ${RETRY_AFTER_SECONDS} s with the same Idempotency-Key to get its answer.`,
};

/**
 * The refusal for a StepkeyError, with Retry-After when the same call may
 * succeed later. `report` says where it happened (and which logger to use)
 * for the log line of an internal failure.
 */
export function refusalOf(error: StepkeyError, report?: ErrorReport): Refusal {
  instrument.answered(error.httpStatus);
  const headers: Record<string, string> = error.retryable ? { 'Retry-After': RETRY_AFTER_SECONDS } : {};
  if (internalCodes.has(error.code)) {
    const failure = internalFailure(error, report ?? { log: defaultLogger(), via: 'trpc' });
    return new Refusal(failure.status, failure.message, { headers, cause: error });
  }
  return new Refusal(error.httpStatus, publicMessages[error.code] ?? error.message, { headers, cause: error });
}
