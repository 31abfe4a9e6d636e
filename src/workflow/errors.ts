/**
 * How the engine tells errors apart.
 *
 *   stored   retryable === false (NonRetryableError, or any error marked so):
 *            recorded as the step's outcome and the run's, replayed to every
 *            later caller.
 *   bug      a definition or serialisation mistake (an output that fails its
 *            schema, a value that is not JSON, a step used twice), or a
 *            database error that retrying cannot fix (an undefined table or
 *            column, a syntax error: see permanentSqlStateClasses): the run
 *            fails at once but stays resumable, so a fixed deploy or schema
 *            can go on.
 *   retry    anything else: retried by the step's policy; when the attempts
 *            run out, the run fails, resumable by the next call with its key.
 */
import { NonRetryableError, isNonRetryable, storedForm, type StoredError } from '../ledger/outcome.js';
import { StepkeyError, isStepkeyError, type StepkeyErrorCode } from '../errors/stepkey-error.js';
import { isConnectionError, isPermanentDatabaseError } from '../errors/pg-errors.js';

const bugCodes = new Set<StepkeyErrorCode>([
  'definition_error',
  'not_serializable',
  'invalid_output',
  'duplicate_step',
  'invalid_step_name',
  'invalid_key',
  'version_not_found',
  'invalid_input',
]);

export type ErrorClass = 'stored' | 'bug' | 'retry';

export function classifyError(error: unknown): ErrorClass {
  if (error instanceof StepkeyError && bugCodes.has(error.code)) return 'bug';
  if (isNonRetryable(error)) return 'stored';
  if (isPermanentDatabaseError(error)) return 'bug';
  return 'retry';
}

/**
 * Why this process stopped executing a run: its lease was taken over,
 * cancelled or not renewed (no progress for a lease); it is shutting down;
 * another holder committed a step first; the database stayed unavailable for
 * longer than a step's retries; or the run's start, carried by a transaction
 * whose connection went, never committed (nothing of the run exists); the
 * run parked: it waits, holding no process, until it is due; or its deadline
 * passed: it ends as deadline_exceeded.
 */
export type StopReason = 'lease_lost' | 'shutting_down' | 'conflict' | 'unavailable' | 'start_lost' | 'parked' | 'deadline';

/**
 * A failure of the database rather than of the step: no connection (refused,
 * closed, terminated, too many clients, none free in time). A step retries
 * it; when its retries run out, the run is left for a sweeper, not failed.
 */
export function isUnavailable(error: unknown): boolean {
  const cause = error instanceof StepAttemptsExhausted ? error.cause : error;
  return isStepkeyError(cause, 'database_unavailable') || (!(cause instanceof StepkeyError) && isConnectionError(cause));
}

/**
 * Thrown into workflow code at the next step boundary once the run must stop
 * in this process. Workflow code should let it pass.
 */
export class RunStopped extends Error {
  override name = 'RunStopped';
  constructor(readonly reason: StopReason) {
    super(`stepkey stopped this run in this process (${reason})`);
  }
}

/** The error a stored outcome stands for, the same on first execution and on replay. */
export function storedErrorToError(stored: StoredError): NonRetryableError {
  const error = new NonRetryableError(stored.message, {
    ...(stored.code === undefined ? {} : { code: String(stored.code) }),
    ...(stored.data === undefined ? {} : { data: stored.data }),
  });
  error.name = stored.name;
  // Stored again as it was (the run's outcome is its failed step's): cause chain and database details kept.
  Object.defineProperty(error, storedForm, { value: stored });
  return error;
}

/** A step's retryable failures used up its attempts: the run fails, resumable. */
export class StepAttemptsExhausted extends Error {
  override name = 'StepAttemptsExhausted';
  constructor(
    readonly step: string,
    readonly attempts: number,
    override readonly cause: unknown,
  ) {
    super(
      `Step '${step}' failed ${attempts} time${attempts === 1 ? '' : 's'}: ${cause instanceof Error ? cause.message : String(cause)}`,
    );
  }
}
