/**
 * Executing steps.
 *
 *   tx     BEGIN; fn(tx); INSERT step row (fenced by the run's lease); COMMIT
 *          — bounded by the step's timeout (statement_timeout and a timer);
 *          — BEGIN goes with fn's first statement; the step row and COMMIT go
 *          at the next step boundary, with whatever commits there (the run's
 *          completion, when the run ends after this step). The first step of a
 *          new run also carries the run's start (its claim), behind a
 *          savepoint, so the start costs no commit of its own.
 *   call   see effects/call-step.ts: each attempt recorded before the call
 *          (riding whatever waits to commit) and ended after it.
 *
 * A finished step replays from the ledger without running. A deterministic
 * error rolls fn's writes back and is recorded as the step's outcome, then
 * thrown again on every replay. Retryable errors are retried by the step's
 * policy.
 */
import { drizzleOn } from '../db/connect.js';
import { statementTimeout, Transaction } from '../db/transaction.js';
import { isQueryCanceled, translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { serializeError, toJsonText } from '../ledger/outcome.js';
import type { StepDeclaration } from './define.js';
import { RunStopped, StepAttemptsExhausted, classifyError, isUnavailable, storedErrorToError } from './errors.js';
import type { StepUse, TxContext } from './handles.js';
import { backoffDelay } from './retry.js';
import type { RunState } from './run-state.js';
import type { FinishedStep } from './sql/load-run.js';
import type { StepRow } from './sql/step-rows.js';
import { commitDeferred, commitWaiting } from './commit.js';
import { decodeValue, encodeChecked } from './values.js';
import { stepInstanceName } from '../keys/derive.js';
import { instrument } from '../telemetry/instrumentation.js';
import { inSpan } from '../telemetry/tracing.js';
import { stepEnding, stepSpan } from '../telemetry/spans.js';
import { commitForAttempt } from './step-limits.js';

/** An attempt's result: a value to record, or an error to record, or an error to retry. */
export type Attempt = { ok: true; body: string } | { ok: false; error: unknown };

/** Runs one attempt of a step's work under its derived key. */
type AttemptOnce = (key: string, attempt: number, instance: string) => Promise<Attempt>;
/** Commits a step's row (and what must commit with it), or leaves it to the next boundary. */
type RecordStep = (row: StepRow) => Promise<'committed' | 'deferred'>;

export interface StepRunOptions {
  /**
   * The step's record commits in the last tx step's transaction, still open
   * (commitWaiting takes it), instead of after it: for steps that only write
   * and cannot fail once attempted, such as `enqueue`.
   */
  joinsDeferred?: boolean;
  /** The step's kind, for its spans (default tx). */
  kind?: 'tx' | 'enqueue';
}

export interface StepTarget {
  state: RunState;
  declaration: StepDeclaration;
  use: StepUse | undefined;
}

export function replay(target: StepTarget, instance: string, finished: FinishedStep): unknown {
  if (!finished.ok) throw storedErrorToError(JSON.parse(finished.body));
  return decodeValue(finished.body, target.declaration.output, `The output of step '${instance}'`);
}

/** One use of a step, entered: its instance name and derived key, not finished yet. */
export interface EnteredStep {
  instance: string;
  key: string;
}

/**
 * What every kind of step does first: refuses a nested or late step, runs
 * steps one at a time in call order, names the use (`name` or `name[id]`,
 * refusing a second use of the same), and replays a finished step without
 * running it (`decode` reads its recorded outcome). `body` runs the step when
 * it has not finished.
 */
export function enterStep(
  target: StepTarget,
  body: (entered: EnteredStep) => Promise<unknown>,
  decode: (finished: FinishedStep, instance: string) => unknown = (finished, instance) => replay(target, instance, finished),
): Promise<unknown> {
  const { state, declaration } = target;
  if (calledFromStepBody(state)) {
    return Promise.reject(
      new StepkeyError('definition_error', `Step '${declaration.name}' was called inside another step of the same run; steps cannot be nested.`),
    );
  }
  if (state.control.ended) {
    return Promise.reject(
      new StepkeyError('definition_error', `Step '${declaration.name}' was called after its run ended (was a step not awaited?).`),
    );
  }
  // One step at a time, in call order, even when workflow code starts several at once.
  return state.control.exclusive(async () => {
    const instance = stepInstanceName(declaration.name, target.use?.id);
    const key = state.record.use(
      instance,
      `Step '${instance}' ran twice in one run. A step used more than once needs a stable discriminator: ` +
        `steps.x.tx(fn, { id: item.sku }) — never a counter or a position.`,
    );
    const done = state.record.finished.get(instance);
    if (done) return decode(done, instance);
    state.record.reach(instance);
    state.control.progress(state.deps.leaseMs);
    return body({ instance, key });
  });
}

/**
 * Nested steps, found without AsyncLocalStorage: on Node 20 it turns on
 * async hooks for the whole process, which cost every promise of every run
 * (about a sixth of the engine's CPU per run in the workflow benchmark).
 * Steps of a run execute one at a time, so a step called while one of its
 * run's step functions is still running is either nested in it (and would
 * wait for it forever) or started alongside it by workflow code. It is
 * nested if it was called during the function's synchronous part, or if the
 * function's frame is in its async stack trace: V8 records every async
 * function that awaits the caller, and runStepBody, an async function,
 * awaits the step's function. Only that case — a step called while another
 * one runs — pays for reading a stack.
 */
interface BodyState {
  running: number;
  synchronous: boolean;
}
const bodies = new WeakMap<RunState, BodyState>();

/** Runs a step's own function (a tx step's, a call step's attempt or its reconcile): steps it calls are refused. */
export async function runStepBody<T>(state: RunState, fn: () => Promise<T>): Promise<T> {
  let body = bodies.get(state);
  if (!body) bodies.set(state, (body = { running: 0, synchronous: false }));
  body.running += 1;
  body.synchronous = true;
  let pending: Promise<T>;
  try {
    pending = fn();
  } catch (error) {
    body.running -= 1;
    throw error;
  } finally {
    body.synchronous = false;
  }
  try {
    return await pending;
  } finally {
    body.running -= 1;
  }
}

function calledFromStepBody(state: RunState): boolean {
  const body = bodies.get(state);
  if (!body || body.running === 0) return false;
  if (body.synchronous) return true;
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 200;
  const stack = new Error().stack ?? '';
  Error.stackTraceLimit = limit;
  return stack.includes('runStepBody');
}

/**
 * What every kind of step with attempts does: replay, retries, recording.
 * `attemptOnce` does the work; `record` commits the step row (and whatever
 * must commit with it) or returns what another holder committed.
 */
export function runStep(
  target: StepTarget,
  attemptOnce: AttemptOnce,
  record: RecordStep,
  options: StepRunOptions = {},
): Promise<unknown> {
  return enterStep(target, ({ instance, key }) => executeStep(target, instance, key, attemptOnce, record, options));
}

async function executeStep(
  target: StepTarget,
  instance: string,
  key: string,
  attemptOnce: AttemptOnce,
  record: RecordStep,
  options: StepRunOptions,
): Promise<unknown> {
  const { state, declaration } = target;
  const { leaseMs } = state.deps;
  if (!options.joinsDeferred) await commitDeferred(state);
  state.control.throwIfStopped();
  faultPoint('engine.before-step', declaration.name);
  const measured = instrument.stepBegun(declaration.name);
  const span = (attempt: number) => () =>
    stepSpan({ scope: state.lease.scope, run: state.lease.key, step: instance, kind: options.kind ?? 'tx', key, attempt });

  for (let attempt = 1; ; attempt += 1) {
    // One attempt in its span: the work and, once it has an outcome, the step's record.
    const tried = await inSpan(span(attempt), () => attemptStep(target, instance, key, attempt, attemptOnce, record, measured), stepEnding);
    if (tried.done) return replay(target, instance, state.record.finished.get(instance)!);
    const delay = backoffDelay(declaration.retry, attempt);
    state.deps.log.info(
      { event: 'step.retry', scope: state.lease.scope, run: state.lease.key, step: instance, try: attempt, delayMs: delay, error: serializeError(tried.error) },
      `step '${instance}' failed (try ${attempt} of ${declaration.retry.attempts}); retrying in ${delay} ms`,
    );
    // An attempt that ran is progress, and its backoff is allowed for; one that could not get
    // a connection is not: an execution that gets none for a lease is let go.
    if (!isUnavailable(tried.error)) state.control.progress(delay + leaseMs);
    await sleep(delay, state.control.signal);
    state.control.throwIfStopped();
  }
}

/** What one attempt of a step came to: its outcome recorded (a success, or a stored error), or an error to retry. */
type Tried = { done: true; error?: unknown } | { done: false; error: unknown };

/** One attempt: the work, then the step's record when it has an outcome. Throws what ends the run's execution. */
async function attemptStep(
  target: StepTarget,
  instance: string,
  key: string,
  attempt: number,
  attemptOnce: AttemptOnce,
  record: RecordStep,
  measured: ReturnType<typeof instrument.stepBegun>,
): Promise<Tried> {
  const { state, declaration } = target;
  const result = await attemptOnce(key, attempt, instance);
  let row: StepRow;
  if (result.ok) {
    row = { key, name: instance, ok: true, body: result.body, attempts: attempt };
  } else {
    const kind = classifyError(result.error);
    if (result.error instanceof RunStopped || kind === 'bug') throw result.error;
    if (kind === 'retry') {
      if (attempt >= declaration.retry.attempts) throw (measured.end('failed', attempt), new StepAttemptsExhausted(instance, attempt, result.error));
      return { done: false, error: result.error };
    }
    row = { key, name: instance, ok: false, body: toJsonText(serializeError(result.error), 'error'), attempts: attempt };
  }
  if ((await record(row)) === 'committed') faultPoint('engine.after-step-commit', declaration.name);
  state.control.progress(state.deps.leaseMs);
  measured.end(row.ok ? 'completed' : 'errored', attempt);
  return result.ok ? { done: true } : { done: true, error: result.error };
}

/**
 * The transaction a step writes in: the run's open start (behind a savepoint,
 * so that a failing step keeps the start) or a new one. Waiting for its
 * connection is bounded by the step's timeout and by a lease (it is not
 * progress); a failure to get one is a failed attempt, retried by the step's
 * policy.
 */
async function stepTransaction(
  state: RunState,
  instance: string,
  timeoutMs: number,
): Promise<{ transaction: Transaction; folded: boolean }> {
  const opening = state.buffer.takeOpening();
  if (opening) {
    opening.pipeline(`savepoint stepkey_start; ${statementTimeout(timeoutMs)}`);
    return { transaction: opening, folded: true };
  }
  try {
    const transaction = await Transaction.begin(state.deps.sql, {
      statementTimeoutMs: timeoutMs,
      acquireTimeoutMs: Math.min(timeoutMs, state.deps.leaseMs),
    });
    return { transaction, folded: false };
  } catch (error) {
    throw translateDatabaseError(error, `starting step '${instance}'`);
  }
}

/** Ends a step transaction that failed: the run's start, if it was carried, still commits. */
async function abandonStep(transaction: Transaction, folded: boolean): Promise<void> {
  if (!folded) return transaction.rollback();
  try {
    await transaction.sql.unsafe('rollback to savepoint stepkey_start');
    await transaction.commit();
  } catch (error) {
    await transaction.rollback();
    throw translateDatabaseError(error, 'recording the start of a run');
  }
}

export function runTxStep(
  target: StepTarget,
  fn: (db: ReturnType<typeof drizzleOn>, context: TxContext) => Promise<unknown>,
): Promise<unknown> {
  const { state, declaration } = target;
  let succeeded: Transaction | undefined;
  return runStep(
    target,
    async (key, attempt, instance) => {
      // The attempt's budget: Postgres cancels a statement still running (waiting on a lock, say)
      // at the timeout (statement_timeout, set with BEGIN), and the timer below gives up on code
      // waiting on anything else.
      let begun;
      try {
        // A limited step takes its token or slot first, or parks the run (src/flow/limit-acquire.ts).
        if (declaration.limit !== undefined) await commitForAttempt(target, instance);
        begun = await stepTransaction(state, instance, declaration.timeoutMs);
      } catch (error) {
        return { ok: false, error };
      }
      const { transaction, folded } = begun;
      state.control.progress(declaration.timeoutMs + state.deps.leaseMs);
      const tx = transaction.sql;
      // Built only when it happens: an Error captures its stack, which is not free on every attempt.
      const timeout = () => stepTimeout(instance, declaration.timeoutMs, attempt);
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(timeout()), declaration.timeoutMs);
      });
      try {
        const value = await Promise.race([runStepBody(state, () => fn(drizzleOn(tx), { sql: tx, key, attempt })), expired]);
        const body = encodeChecked(value, declaration.output, `The output of step '${instance}'`);
        succeeded = transaction;
        return { ok: true, body };
      } catch (error) {
        await abandonStep(transaction, folded);
        return { ok: false, error: isQueryCanceled(error) ? timeout() : error };
      } finally {
        clearTimeout(timer);
      }
    },
    async (row) => {
      const open = succeeded;
      succeeded = undefined;
      if (!open) {
        // A deterministic error: fn's writes were rolled back; the error is the step's outcome.
        await commitWaiting(state, { rows: [row] });
        return 'committed';
      }
      state.buffer.deferred = { transaction: open, rows: [row], label: declaration.name };
      state.record.finished.set(row.name, row);
      return 'deferred';
    },
  );
}

export function stepTimeout(instance: string, timeoutMs: number, attempt: number): StepkeyError {
  return new StepkeyError('step_timeout', `Step '${instance}' timed out after ${timeoutMs} ms (attempt ${attempt}).`);
}

export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
