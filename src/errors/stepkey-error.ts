/**
 * The one error class of stepkey. Every failure a caller can see carries a
 * `code` from the table below; the table says which HTTP status it maps to and
 * whether retrying the same call may succeed.
 */

const codeTable = {
  // Bad input from the caller: fix the call, retrying will not help.
  invalid_key: { status: 400, retryable: false },
  invalid_scope: { status: 400, retryable: false },
  invalid_step_name: { status: 400, retryable: false },
  invalid_input: { status: 400, retryable: false },
  invalid_options: { status: 400, retryable: false },
  not_serializable: { status: 500, retryable: false },
  not_fingerprintable: { status: 400, retryable: false },
  // The key is known with another request body or purpose.
  mismatch: { status: 422, retryable: false },
  // Another attempt holds the key right now.
  in_progress: { status: 409, retryable: true },
  // This process no longer owns the key: its lease was taken over or cancelled.
  lease_lost: { status: 409, retryable: true },
  // Postgres could not be reached or dropped the connection.
  database_unavailable: { status: 503, retryable: true },
  database_error: { status: 500, retryable: true },
  // stepkey's tables are missing: `stepkey migrate` has not run against this database.
  not_migrated: { status: 500, retryable: false },
  // Workflow definitions and runs.
  definition_error: { status: 500, retryable: false },
  workflow_not_found: { status: 404, retryable: false },
  version_not_found: { status: 500, retryable: false },
  run_not_found: { status: 404, retryable: false },
  // A typed read or send named one workflow, and the run is another's.
  workflow_mismatch: { status: 422, retryable: false },
  // The run has ended (completed or cancelled): it takes no more events.
  run_ended: { status: 409, retryable: false },
  duplicate_step: { status: 500, retryable: false },
  invalid_output: { status: 500, retryable: false },
  step_timeout: { status: 504, retryable: true },
  run_failed: { status: 500, retryable: false },
  run_cancelled: { status: 409, retryable: false },
  run_deadline_exceeded: { status: 409, retryable: false },
  // resolve: the run is not waiting for review (at that step).
  not_in_review: { status: 409, retryable: false },
  // rerun: a step it would execute again had a confirmed outside effect.
  rerun_refused: { status: 409, retryable: false },
  // Effects and delivery.
  effect_not_found: { status: 500, retryable: false },
  delivery_failed: { status: 502, retryable: true },
  // Shutting down: the work is released for another process.
  shutting_down: { status: 503, retryable: true },
} as const satisfies Record<string, { status: number; retryable: boolean }>;

export type StepkeyErrorCode = keyof typeof codeTable;

export interface StepkeyErrorOptions {
  cause?: unknown;
  details?: Record<string, unknown>;
  /** Overrides the code's default: whether the same call may succeed later. */
  retryable?: boolean;
}

export class StepkeyError extends Error {
  override readonly name = 'StepkeyError';
  readonly code: StepkeyErrorCode;
  readonly details: Record<string, unknown>;
  readonly retryable: boolean;

  constructor(code: StepkeyErrorCode, message: string, options: StepkeyErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options.details ?? {};
    this.retryable = options.retryable ?? codeTable[code].retryable;
  }

  /** The HTTP status this error maps to. */
  get httpStatus(): number {
    return codeTable[this.code].status;
  }
}

/** What a call the engine refuses once its shutdown began is told (engine.start/run/attempt/enqueue). */
export function shuttingDownError(): StepkeyError {
  return new StepkeyError('shutting_down', 'The engine is shutting down and starts no new runs.');
}

export function httpStatusOf(code: StepkeyErrorCode): number {
  return codeTable[code].status;
}

export function isStepkeyError(error: unknown, code?: StepkeyErrorCode): error is StepkeyError {
  return error instanceof StepkeyError && (code === undefined || error.code === code);
}
