/**
 * Internal failures of a tRPC call: the core's 500 with a fixed message and
 * an error id (idempotency/internal-failure.ts), logged with event
 * `trpc.internal_error`, as a TRPCError — and how to tell tRPC's wrapping of
 * an unexpected error from a 500 the app raised on purpose.
 */
import { TRPCError } from '@trpc/server';
import { errorReport as coreReport, internalFailure, type ErrorReport } from '../idempotency/internal-failure.js';
import type { Logger } from '../log/logger.js';

export type { ErrorReport } from '../idempotency/internal-failure.js';

/** The report of a call: its logger (config.logger, pino by default), path and key. */
export function errorReport(config: { logger?: Logger | false }, path: string | undefined, ref?: { scope: string; key: string }): ErrorReport {
  return coreReport(config, 'trpc', path, ref);
}

/** The 500 for an internal failure; logs the full error with the id the caller is given. */
export function internalServerError(error: unknown, report: ErrorReport): TRPCError {
  const failure = internalFailure(error, report);
  return new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: failure.message, cause: error });
}

/**
 * Whether a TRPCError is tRPC's wrapping of an unexpected error (its message
 * is the thrown error's own) rather than a 500 the app raised on purpose.
 */
export function isWrappedUnexpected(error: TRPCError): boolean {
  const { cause } = error;
  return error.code === 'INTERNAL_SERVER_ERROR' && cause instanceof Error && !(cause instanceof TRPCError) && cause.name !== 'TRPCError' && error.message === cause.message;
}
