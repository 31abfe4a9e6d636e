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
 *   call   everything waiting commits first; then fn(key, signal) outside any
 *          transaction; then one fenced INSERT.
 *
 * A finished step replays from the ledger without running. A deterministic
 * error rolls fn's writes back and is recorded as the step's outcome, then
 * thrown again on every replay. Retryable errors are retried by the step's
 * policy.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { drizzleOn } from '../db/connect.js';
import { statementTimeout, Transaction } from '../db/transaction.js';
import { isQueryCanceled, translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { serializeError, toJsonText } from '../ledger/outcome.js';
import type { StepDeclaration } from './define.js';
import { RunStopped, StepAttemptsExhausted, classifyError, storedErrorToError } from './errors.js';
import type { CallContext, StepUse, TxContext } from './handles.js';
import { backoffDelay } from './retry.js';
import type { RunState } from './run-state.js';
import type { FinishedStep } from './sql/load-run.js';
import type { StepRow } from './sql/step-rows.js';
import { commitDeferred, commitWaiting } from './commit.js';
import { decodeValue, encodeChecked } from './values.js';
import { stepInstanceName } from '../keys/derive.js';

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
}

export interface StepTarget {
  state: RunState;
  declaration: StepDeclaration;
  use: StepUse | undefined;
}

function replay(target: StepTarget, instance: string, finished: FinishedStep): unknown {
  if (!finished.ok) throw storedErrorToError(JSON.parse(finished.body));
  return decodeValue(finished.body, target.declaration.output, `The output of step '${instance}'`);
}

/**
 * What every kind of step does around its attempts: replay, retries,
 * recording. `attemptOnce` does the work; `record` commits the step row (and
 * whatever must commit with it) or returns what another holder committed.
 */
export function runStep(
  target: StepTarget,
  attemptOnce: AttemptOnce,
  record: RecordStep,
  options: StepRunOptions = {},
): Promise<unknown> {
  const { state, declaration } = target;
  if (insideStep.getStore() === state) {
    return Promise.reject(
      new StepkeyError('definition_error', `Step '${declaration.name}' was called inside another step of the same run; steps cannot be nested.`),
    );
  }
  if (state.ended) {
    return Promise.reject(
      new StepkeyError('definition_error', `Step '${declaration.name}' was called after its run ended (was a step not awaited?).`),
    );
  }
  // One step at a time, in call order, even when workflow code starts several at once.
  return state.exclusive(() => insideStep.run(state, () => executeStep(target, attemptOnce, record, options)));
}

/** Which run's step the current async context is inside (to refuse nested steps). */
const insideStep = new AsyncLocalStorage<RunState>();

async function executeStep(
  target: StepTarget,
  attemptOnce: AttemptOnce,
  record: RecordStep,
  options: StepRunOptions,
): Promise<unknown> {
  const { state, declaration } = target;
  const instance = stepInstanceName(declaration.name, target.use?.id);
  const key = state.use(
    instance,
    `Step '${instance}' ran twice in one run. A step used more than once needs a stable discriminator: ` +
      `steps.x.tx(fn, { id: item.sku }) — never a counter or a position.`,
  );
  const done = state.finished.get(instance);
  if (done) return replay(target, instance, done);
  if (!options.joinsDeferred) await commitDeferred(state);
  state.throwIfStopped();
  faultPoint('engine.before-step', declaration.name);

  for (let attempt = 1; ; attempt += 1) {
    const result = await attemptOnce(key, attempt, instance);
    let row: StepRow;
    if (result.ok) {
      row = { key, name: instance, ok: true, body: result.body, attempts: attempt };
    } else {
      const kind = classifyError(result.error);
      if (result.error instanceof RunStopped || kind === 'bug') throw result.error;
      if (kind === 'retry') {
        if (attempt >= declaration.retry.attempts) throw new StepAttemptsExhausted(instance, attempt, result.error);
        await sleep(backoffDelay(declaration.retry, attempt), state.signal);
        state.throwIfStopped();
        continue;
      }
      row = { key, name: instance, ok: false, body: toJsonText(serializeError(result.error), 'error'), attempts: attempt };
    }
    if ((await record(row)) === 'committed') faultPoint('engine.after-step-commit', declaration.name);
    return replay(target, instance, state.finished.get(instance)!);
  }
}

/**
 * The transaction a step writes in: the run's open start (behind a savepoint,
 * so that a failing step keeps the start) or a new one.
 */
async function stepTransaction(
  state: RunState,
  instance: string,
  timeoutMs: number,
): Promise<{ transaction: Transaction; folded: boolean }> {
  const opening = state.takeOpening();
  if (opening) {
    opening.pipeline(`savepoint stepkey_start; ${statementTimeout(timeoutMs)}`);
    return { transaction: opening, folded: true };
  }
  try {
    return { transaction: await Transaction.begin(state.deps.sql, { statementTimeoutMs: timeoutMs }), folded: false };
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
      const { transaction, folded } = await stepTransaction(state, instance, declaration.timeoutMs);
      const tx = transaction.sql;
      const timeout = stepTimeout(instance, declaration.timeoutMs, attempt);
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(timeout), declaration.timeoutMs);
      });
      try {
        const value = await Promise.race([fn(drizzleOn(tx), { sql: tx, key, attempt }), expired]);
        const body = encodeChecked(value, declaration.output, `The output of step '${instance}'`);
        succeeded = transaction;
        return { ok: true, body };
      } catch (error) {
        await abandonStep(transaction, folded);
        return { ok: false, error: isQueryCanceled(error) ? timeout : error };
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
      state.deferred = { transaction: open, rows: [row], label: declaration.name };
      state.finished.set(row.name, row);
      return 'deferred';
    },
  );
}

export function runCallStep(target: StepTarget, fn: (context: CallContext) => Promise<unknown>): Promise<unknown> {
  const { state, declaration } = target;
  return runStep(
    target,
    async (key, attempt, instance) => {
      if (attempt === 1) await commitWaiting(state);
      const controller = new AbortController();
      const onStop = () => controller.abort(state.signal.reason);
      state.signal.addEventListener('abort', onStop, { once: true });
      const timeout = stepTimeout(instance, declaration.timeoutMs, attempt);
      const timer = setTimeout(() => controller.abort(timeout), declaration.timeoutMs);
      try {
        const aborted = new Promise<never>((_, reject) => {
          controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true });
        });
        aborted.catch(() => {});
        const value = await Promise.race([fn({ key, signal: controller.signal, attempt }), aborted]);
        faultPoint('engine.in-call', declaration.name);
        return { ok: true, body: encodeChecked(value, declaration.output, `The output of step '${instance}'`) };
      } catch (error) {
        return { ok: false, error };
      } finally {
        clearTimeout(timer);
        state.signal.removeEventListener('abort', onStop);
      }
    },
    async (row) => {
      await commitWaiting(state, { rows: [row] });
      return 'committed';
    },
  );
}

function stepTimeout(instance: string, timeoutMs: number, attempt: number): StepkeyError {
  return new StepkeyError('step_timeout', `Step '${instance}' timed out after ${timeoutMs} ms (attempt ${attempt}).`);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
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
