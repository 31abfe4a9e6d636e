/**
 * Postgres errors, translated in one place. postgres.js raises `PostgresError`
 * with a SQLSTATE in `code`, and plain errors with codes such as
 * `CONNECTION_CLOSED` when the socket goes; drizzle wraps either in
 * `DrizzleQueryError` with the original as `cause`.
 */
import { StepkeyError } from './stepkey-error.js';

export const SqlState = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  checkViolation: '23514',
  notNullViolation: '23502',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  lockNotAvailable: '55P03',
  queryCanceled: '57014',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  inFailedTransaction: '25P02',
  tooManyConnections: '53300',
  /** Raised by stepkey.lease_held(): a fenced write found its lease gone. */
  leaseLost: 'SKL01',
} as const;

/** Connection-level failures reported by postgres.js or Node's sockets. */
const connectionCodes = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

const unavailableStates = new Set<string>([
  SqlState.adminShutdown,
  SqlState.crashShutdown,
  SqlState.cannotConnectNow,
  SqlState.tooManyConnections,
  // Class 08: connection exceptions.
  '08000',
  '08003',
  '08006',
  '08001',
  '08004',
]);

/** The SQLSTATE (or postgres.js connection code) of an error, looking through `cause`. */
export function errorCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth += 1) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && code.length > 0 && !(current instanceof StepkeyError)) return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

export function isUniqueViolation(error: unknown): boolean {
  return errorCode(error) === SqlState.uniqueViolation;
}

export function isLeaseLost(error: unknown): boolean {
  return errorCode(error) === SqlState.leaseLost;
}

/** A statement cancelled by Postgres (statement_timeout, or a cancel request). */
export function isQueryCanceled(error: unknown): boolean {
  return errorCode(error) === SqlState.queryCanceled;
}

export function isLockTimeout(error: unknown): boolean {
  return errorCode(error) === SqlState.lockNotAvailable;
}

/** Errors raised by Postgres itself (constraint, check, …), as opposed to the connection. */
export function isConstraintViolation(error: unknown): boolean {
  const code = errorCode(error);
  return code !== undefined && code.startsWith('23');
}

export function isConnectionError(error: unknown): boolean {
  const code = errorCode(error);
  return code !== undefined && (connectionCodes.has(code) || unavailableStates.has(code));
}

/** Transient conflicts that a fresh transaction may not meet again. */
export function isTransientConflict(error: unknown): boolean {
  const code = errorCode(error);
  return code === SqlState.serializationFailure || code === SqlState.deadlockDetected;
}

/**
 * Wraps a database failure in a StepkeyError: `database_unavailable` when the
 * connection is gone (the caller should answer 503 and retry later), otherwise
 * `database_error`. StepkeyErrors pass through unchanged.
 */
export function translateDatabaseError(error: unknown, action: string): StepkeyError {
  if (error instanceof StepkeyError) return error;
  const code = errorCode(error);
  const message = error instanceof Error ? error.message : String(error);
  if (code === SqlState.leaseLost) {
    return new StepkeyError('lease_lost', `The lease was taken over or cancelled while ${action}.`, { cause: error });
  }
  if (isConnectionError(error)) {
    return new StepkeyError('database_unavailable', `Postgres is unavailable while ${action}: ${message}`, {
      cause: error,
      details: { sqlState: code },
    });
  }
  return new StepkeyError('database_error', `Postgres failed while ${action}: ${message}`, {
    cause: error,
    details: { sqlState: code },
  });
}
