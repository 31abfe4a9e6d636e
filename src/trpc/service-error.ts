/**
 * The one mapping from a StepkeyError to the TRPCError a tRPC caller gets.
 * Idempotent procedures, workflow procedures and createWorkflowRouter all
 * answer through it, so the same failure gets the same answer everywhere.
 *
 * Guarantees:
 * - The status is the error code's own (stepkey-error.ts holds that table):
 *   400, 404, 409, 422, 500, 502, 503 or 504.
 * - A retryable error carries Retry-After, so that the client retries with the
 *   same key: 503 when the database is unavailable or the process is shutting
 *   down, 409 when a run's lease was taken over (the run continues elsewhere,
 *   and the retry gets its answer).
 * - A database failure never shows the driver's message (host, port, SQL) to
 *   the caller; the StepkeyError stays the TRPCError's `cause`, for onError
 *   and the server log.
 * - A failed run (retries used up, a bug) and a database error answer a fixed
 *   message with an error id, never the step's own message; the full error is
 *   logged with the id (internal-error.ts).
 */
import { TRPCError } from '@trpc/server';
import type { TRPC_ERROR_CODE_KEY } from '@trpc/server/rpc';
import type { StepkeyError, StepkeyErrorCode } from '../errors/stepkey-error.js';
import type { RequestAccess } from './request-access.js';
import { instrument } from '../telemetry/instrumentation.js';
import { defaultLogger } from '../log/logger.js';
import { internalServerError, type ErrorReport } from './internal-error.js';

/** Codes whose message is internal (a step's error, the driver's): answered with an error id instead. */
const internalCodes = new Set<StepkeyErrorCode>(['run_failed', 'database_error']);

/** Seconds a caller is asked to wait before retrying after a retryable error. */
const RETRY_AFTER_SECONDS = '1';

const trpcCodeByStatus: Partial<Record<number, TRPC_ERROR_CODE_KEY>> = {
  400: 'BAD_REQUEST',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  422: 'UNPROCESSABLE_CONTENT',
  500: 'INTERNAL_SERVER_ERROR',
  502: 'BAD_GATEWAY',
  503: 'SERVICE_UNAVAILABLE',
  504: 'GATEWAY_TIMEOUT',
};

/** Messages that replace the error's own, which names internals the caller must not see. */
const publicMessages: Partial<Record<StepkeyErrorCode, string>> = {
  database_unavailable: `The database is unavailable; retry after ${RETRY_AFTER_SECONDS} s.`,
  not_migrated: "The database has no stepkey tables yet: run `stepkey migrate` against it (the server log has the details).",
  lease_lost: `The operation for this key was taken over and continues in another process; retry after ${RETRY_AFTER_SECONDS} s with the same Idempotency-Key to get its answer.`,
};

/**
 * The TRPCError for a StepkeyError; sets Retry-After on the response when the
 * same call may succeed later. `report` says where it happened (and which
 * logger to use) for the log line of an internal failure.
 */
export function toServiceError<Ctx>(error: StepkeyError, access: RequestAccess<Ctx>, ctx: Ctx, report?: ErrorReport): TRPCError {
  instrument.answered(error.httpStatus);
  if (error.retryable) access.setHeader(ctx, 'Retry-After', RETRY_AFTER_SECONDS);
  if (internalCodes.has(error.code)) return internalServerError(error, report ?? { log: defaultLogger() });
  return new TRPCError({
    code: trpcCodeByStatus[error.httpStatus] ?? 'INTERNAL_SERVER_ERROR',
    message: publicMessages[error.code] ?? error.message,
    cause: error,
  });
}
