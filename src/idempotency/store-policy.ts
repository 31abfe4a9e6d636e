/**
 * Which answers are part of a key's outcome (stored, replayed to every
 * retry) and which are not (the work's writes roll back, the key is
 * released, the retry runs), for every kind of keyed call:
 *
 *   stored     a success (2xx, 3xx); a deterministic client error — a 4xx
 *              other than 401, 403, 408, 409, 429 and 499 — and any error
 *              marked non-retryable (retryable === false)
 *   released   5xx, unexpected errors, and 401/403/408/409/429/499
 *              (transient, or decided before any work)
 *
 * And the one table from an error code to its HTTP status, for errors that
 * are stored as `{ name, message, code }` (a NonRetryableError's code, a
 * tRPC error's code): a code this table does not name is a 400.
 */
import type { StoredError } from '../ledger/outcome.js';

/** 4xx statuses never stored: transient, or decided before the work began. */
const transientClientErrors = new Set([401, 403, 408, 409, 429, 499]);

/** Whether an answer with this status is stored as the key's outcome. */
export function isStoredStatus(status: number): boolean {
  if (status < 400) return true;
  return status < 500 && !transientClientErrors.has(status);
}

/** Whether a client error (4xx) with this status is stored; successes are not errors. */
export function isStoredErrorStatus(status: number): boolean {
  return status >= 400 && isStoredStatus(status);
}

/** Error codes (tRPC's names, which apps reuse for NonRetryableError) and their statuses. */
const statusByCode: Readonly<Record<string, number>> = {
  BAD_REQUEST: 400,
  PARSE_ERROR: 400,
  UNAUTHORIZED: 401,
  PAYMENT_REQUIRED: 402,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_SUPPORTED: 405,
  TIMEOUT: 408,
  CONFLICT: 409,
  PRECONDITION_FAILED: 412,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  UNPROCESSABLE_CONTENT: 422,
  TOO_MANY_REQUESTS: 429,
  CLIENT_CLOSED_REQUEST: 499,
};

/** The status a stored error is answered with: its code's (a name above, or a 4xx number), else 400. */
export function storedErrorStatus(stored: Pick<StoredError, 'code'>): number {
  const { code } = stored;
  if (typeof code === 'number' && Number.isInteger(code) && code >= 400 && code < 500) return code;
  if (typeof code === 'string' && Object.hasOwn(statusByCode, code)) return statusByCode[code]!;
  return 400;
}
