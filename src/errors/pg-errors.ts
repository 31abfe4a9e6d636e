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
  undefinedTable: '42P01',
  undefinedFunction: '42883',
  invalidSchemaName: '3F000',
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
  if (code !== undefined && (connectionCodes.has(code) || unavailableStates.has(code))) return true;
  return code === 'XX000' && citusNodeLost.test(errorMessage(error));
}

/**
 * Citus (the coordinator of a distributed stepkey) reports a worker it cannot
 * reach as 08006, but a connection lost in the middle of a distributed
 * transaction in some paths as an internal error (XX000) naming the remote
 * node: the database is unavailable, not the statement wrong.
 */
const citusNodeLost =
  /remote node .* (failed|lost)|connection to the remote node|connection not open|failure on connection marked as essential|could not establish any connections to the node/i;

function errorMessage(error: unknown): string {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth += 1) {
    const message = (current as { message?: unknown }).message;
    if (typeof message === 'string' && (current as { code?: unknown }).code === 'XX000') return message;
    current = (current as { cause?: unknown }).cause;
  }
  return '';
}

/**
 * SQLSTATE classes of errors that the same statement meets again on every
 * retry, until someone changes the schema, the grants or the code:
 *
 *   0A  feature not supported
 *   22  data exception (a value the column or function cannot take)
 *   42  syntax error or access rule violation (undefined table, column or
 *       function, syntax, insufficient privilege, …)
 *   3F  invalid schema name
 *
 * A step that meets one is not retried; its run stops, resumable, with the
 * SQLSTATE in its stored error.
 */
export const permanentSqlStateClasses = ['0A', '22', '42', '3F'] as const;

/** Whether Postgres raised (anywhere in the cause chain) an error that retrying cannot fix. */
export function isPermanentDatabaseError(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < 6 && current && typeof current === 'object'; depth += 1) {
    const { name, code } = current as { name?: unknown; code?: unknown };
    if (name === 'PostgresError' && typeof code === 'string') {
      return (permanentSqlStateClasses as readonly string[]).includes(code.slice(0, 2));
    }
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/** Transient conflicts that a fresh transaction may not meet again. */
export function isTransientConflict(error: unknown): boolean {
  const code = errorCode(error);
  return code === SqlState.serializationFailure || code === SqlState.deadlockDetected;
}

/** The schemas `stepkey migrate` installs: an object missing from one of them means the database was not migrated. */
const migratedObject = /\b(stepkey|graphile_worker)\.\w+|schema "(stepkey|graphile_worker)"/;

/**
 * The driver's message naming a table, function or schema of stepkey's (or
 * graphile-worker's) that does not exist — the migrations never ran against
 * this database — or undefined for any other error.
 */
function missingObjectMessage(error: unknown): string | undefined {
  const code = errorCode(error);
  if (code !== SqlState.undefinedTable && code !== SqlState.undefinedFunction && code !== SqlState.invalidSchemaName) return undefined;
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth += 1) {
    if (current instanceof Error && migratedObject.test(current.message) && !current.message.startsWith('Failed query')) return current.message;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * Wraps a database failure in a StepkeyError: `database_unavailable` when the
 * connection is gone (the caller should answer 503 and retry later),
 * `not_migrated` when stepkey's tables are missing, otherwise
 * `database_error`. StepkeyErrors pass through unchanged.
 */
export function translateDatabaseError(error: unknown, action: string): StepkeyError {
  if (error instanceof StepkeyError) return error;
  const code = errorCode(error);
  const message = error instanceof Error ? error.message : String(error);
  if (code === SqlState.leaseLost) {
    return new StepkeyError('lease_lost', `The lease was taken over or cancelled while ${action}.`, { cause: error });
  }
  const missing = missingObjectMessage(error);
  if (missing !== undefined) {
    return new StepkeyError(
      'not_migrated',
      `The database has no stepkey tables (${missing}, while ${action}): run \`stepkey migrate\` (or migrate(url) from 'stepkey') against it first.`,
      { cause: error, details: { sqlState: code } },
    );
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
