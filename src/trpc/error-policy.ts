/**
 * Which resolver errors are part of the answer (stored, replayed to every
 * retry) and which are not (the key is released, the retry runs), by the
 * rule every keyed call follows (idempotency/store-policy.ts):
 *
 *   stored     a TRPCError with a 4xx code other than 401, 403, 408, 409, 429
 *              (and 499) — a deterministic client error raised after the work
 *              began — and any error marked non-retryable (retryable === false)
 *   released   5xx, unexpected errors, and those transient 4xx (decided
 *              before any work)
 */
import { TRPCError, getTRPCErrorFromUnknown } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { TRPC_ERROR_CODES_BY_KEY } from '@trpc/server/rpc';
import { isStoredErrorStatus } from '../idempotency/store-policy.js';
import { isNonRetryable, serializeError, toJsonText, type StoredError } from '../ledger/outcome.js';
import type { OutcomeToStore } from '../ledger/types.js';

type TrpcCode = TRPCError['code'];

/**
 * The TRPCError a resolver error is answered with. An error marked
 * non-retryable (a NonRetryableError from a workflow, for instance) is a
 * client error: BAD_REQUEST, or its own code when that is a tRPC code — never
 * the 500 tRPC would make of it.
 */
export function toTrpcError(error: unknown): TRPCError {
  const nonRetryable = isNonRetryable(error)
    ? error
    : error instanceof TRPCError && error.code === 'INTERNAL_SERVER_ERROR' && isNonRetryable(error.cause)
      ? error.cause
      : undefined;
  if (nonRetryable) {
    const stored = serializeError(nonRetryable);
    return new TRPCError({ code: trpcCodeOf(stored), message: stored.message, cause: nonRetryable });
  }
  return getTRPCErrorFromUnknown(error);
}

/** What to store for a resolver error (already passed through toTrpcError), or undefined to release the key. */
export function storedTrpcError(error: TRPCError): OutcomeToStore | undefined {
  const status = getHTTPStatusCodeFromError(error);
  if (!isStoredErrorStatus(status)) return undefined;
  const stored: StoredError = { name: 'TRPCError', message: error.message, code: error.code };
  return { ok: false, body: toJsonText(stored, 'error'), code: status };
}

/** The stored code if it is one of the installed tRPC's codes, otherwise BAD_REQUEST. */
function trpcCodeOf(stored: StoredError): TrpcCode {
  return typeof stored.code === 'string' && Object.hasOwn(TRPC_ERROR_CODES_BY_KEY, stored.code) ? (stored.code as TrpcCode) : 'BAD_REQUEST';
}

/** The TRPCError a stored error stands for: its own code if it is a tRPC code, otherwise BAD_REQUEST. */
export function trpcErrorFromStored(stored: StoredError): TRPCError {
  return new TRPCError({ code: trpcCodeOf(stored), message: stored.message });
}
