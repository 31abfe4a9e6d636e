/**
 * Executing a run: its workflow function with a handle per step, then the
 * run's outcome — all from a lease this process holds.
 *
 *   completed   the output, stored in the run's row (one commit, fenced)
 *   errored     a deterministic error escaped the workflow: stored, final
 *   failed      anything else (retries used up, a bug): resumable, not stored
 *   stopped     this process must let go: lease lost, shutting down, a
 *               conflict with another holder's commit, or the database
 *               unavailable for longer than a step's retries (the run stays
 *               in progress, its lease ends, and any sweeper continues it)
 */
import { translateDatabaseError } from '../errors/pg-errors.js';
import { faultPoint } from '../faults/fault-points.js';
import { assertValidKey } from '../keys/validate.js';
import { serializeError, toJsonText, type StoredError } from '../ledger/outcome.js';
import { failRunStatement } from '../lifecycle/fail.js';
import type { Workflow } from './define.js';
import { RunStopped, StepAttemptsExhausted, classifyError, isUnavailable, type StopReason } from './errors.js';
import type { RunContext } from './handles.js';
import type { RunState } from './run-state.js';
import { commitWaiting } from './commit.js';
import { runTxStep } from './steps.js';
import { runCallStep } from './effects/call-step.js';
import { encodeChecked } from './values.js';
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { Transaction } from '../db/transaction.js';
import { wakeParentStatements } from '../lifecycle/wake.js';
import { waitView, type RunWaitView } from '../lifecycle/wait.js';
import { activeTraceContext, inSpan } from '../telemetry/tracing.js';
import { runEnding, runSpan } from '../telemetry/spans.js';

export type Settled =
  /** The stored result, with the workflow version whose output schema reads it. */
  | { state: 'completed'; body: string; workflow: string; version: number | null }
  | { state: 'errored'; error: StoredError }
  | { state: 'failed'; error: StoredError }
  | { state: 'cancelled'; reason: StoredError }
  /** Its deadline passed before it ended. */
  | { state: 'deadline_exceeded'; reason: StoredError }
  /** The run parked (its wait committed); it continues when due, in any process. */
  | { state: 'waiting'; wait: RunWaitView }
  | { state: 'stopped'; reason: StopReason };

/** Extra step kinds (the outbox's `enqueue`, the waits) plug in here. */
export type StepHandleExtension = (
  state: RunState,
  declaration: Workflow['steps'][string],
  workflow: Workflow,
) => Record<string, unknown>;

export async function executeRun(
  state: RunState,
  workflow: Workflow,
  input: unknown,
  extensions: readonly StepHandleExtension[] = [],
): Promise<Settled> {
  const { scope, key } = state.lease;
  const span = () =>
    runSpan({ scope, key, workflow: workflow.name, version: workflow.version, attempt: state.trace?.attempt ?? 1, continues: state.trace?.context });
  state.input = input;
  return inSpan<Settled>(span, async () => {
    // A run stored without a trace context: later executions continue this one's (see RunState.storesTrace).
    if (state.storesTrace) state.buffer.traceToStore = activeTraceContext() ?? undefined;
    try {
      return await execute(state, workflow, input, extensions);
    } finally {
      // Anything still uncommitted here belongs to an execution that failed unexpectedly.
      await state.buffer.takeDeferred()?.transaction.rollback();
      await state.buffer.takeOpening()?.rollback();
      // On Citus: slots still held by a run moved under this execution (a cancel) go back now.
      await state.deps.limits?.afterExecution(state);
    }
  }, runEnding);
}

async function execute(
  state: RunState,
  workflow: Workflow,
  input: unknown,
  extensions: readonly StepHandleExtension[],
): Promise<Settled> {
  const what = `workflow '${workflow.name}' v${workflow.version}`;
  let outcome: { ok: boolean; body: string };
  try {
    const value = await workflow.run({ input, steps: handles(state, workflow, extensions), ctx: context(state, workflow) });
    // Steps called and not awaited finish before the run's outcome is recorded.
    await state.control.exclusive(async () => undefined);
    state.control.ended = true;
    state.control.throwIfStopped();
    outcome = { ok: true, body: encodeChecked(value, workflow.output, `The result of ${what}`) };
  } catch (caught) {
    state.control.ended = true;
    // A halted execution fails with the error that halted it, whatever the workflow code threw after.
    const error = state.control.halted ? state.control.halted.error : caught;
    if (state.control.parked) return { state: 'waiting', wait: waitView(state.control.parked) };
    if (state.control.stopReason || (!state.control.halted && error instanceof RunStopped)) {
      // What is done is kept (the start, the last step), so another process goes on from there.
      await commitWaiting(state).catch(() => undefined);
      return { state: 'stopped', reason: state.control.stopReason ?? 'lease_lost' };
    }
    if (!state.control.halted && isUnavailable(error)) {
      // An outage is not the step's fault: whatever sweeper runs once the database is back goes on.
      state.control.stop('unavailable');
      return { state: 'stopped', reason: 'unavailable' };
    }
    if (state.control.halted || classifyError(error) !== 'stored') return fail(state, error);
    outcome = { ok: false, body: toJsonText(serializeError(error), 'error') };
  }

  faultPoint('engine.before-complete', workflow.name);
  try {
    // One commit: the completion, with the last step and anything else still waiting — and, for a
    // child run, its parent marked due.
    await commitWaiting(state, {
      complete: { outcome, retentionMs: state.deps.retentionMs },
      statements: (q) => wakeParent(state, q),
    });
  } catch (error) {
    if (error instanceof RunStopped) return { state: 'stopped', reason: error.reason };
    if (state.control.halted) return fail(state, state.control.halted.error);
    throw translateDatabaseError(error, `completing ${what}`);
  }
  wakeParentHere(state);
  return outcome.ok
    ? { state: 'completed', body: outcome.body, workflow: workflow.name, version: workflow.version }
    : { state: 'errored', error: JSON.parse(outcome.body) };
}

/** Marks the run failed but resumable, keeping the error (and the step) for diagnosis. */
async function fail(state: RunState, error: unknown): Promise<Settled> {
  const stored: StoredError =
    error instanceof StepAttemptsExhausted
      ? { ...serializeError(error.cause), data: { step: error.step, attempts: error.attempts } }
      : serializeError(error);
  if (error instanceof StepAttemptsExhausted) stored.message = error.message;
  try {
    // What is done is kept. Records that could not be kept (they wait for a commit again) keep the
    // run from failing without them: it stays in progress, for a takeover to record them.
    let unkept: unknown;
    await commitWaiting(state).catch((failure: unknown) => {
      if (state.buffer.pending.length) unkept = failure;
    });
    if (unkept instanceof RunStopped) return { state: 'stopped', reason: unkept.reason };
    if (unkept !== undefined) throw unkept;
    const failing = await Transaction.begin(state.deps.sql, { acquireTimeoutMs: state.deps.leaseMs });
    const release = state.deps.limits?.releaseWith(state, failing.sql);
    const [rows] = await failing.commit(
      failRunStatement(failing.sql, state.deps.clock, state.lease, toJsonText(stored, 'error'), { retentionMs: state.deps.retentionMs }),
      ...wakeParent(state, failing.sql),
      ...(release ? [release] : []),
    );
    if (rows.length === 0) return { state: 'stopped', reason: 'lease_lost' };
    await state.deps.limits?.afterRelease(state, release);
  } catch (failure) {
    throw translateDatabaseError(failure, 'recording a failed run');
  }
  wakeParentHere(state);
  return { state: 'failed', error: stored };
}

/**
 * A child run's end marks its parent due, if the parent is parked on it: the
 * parent's row locked first, then the conditional wake (see
 * lifecycle/wake.ts).
 */
function wakeParent(state: RunState, q: Queryable) {
  return wakeParentStatements(q, state.deps.clock, state.lease, state.parentRun);
}

/** After the commit: a parent now due continues here at once if this process runs its version. */
function wakeParentHere(state: RunState): void {
  if (state.parentRun) state.deps.hooks.wake({ scope: state.lease.scope, key: state.parentRun });
}

function handles(state: RunState, workflow: Workflow, extensions: readonly StepHandleExtension[]) {
  const result: Record<string, unknown> = {};
  for (const [property, declaration] of Object.entries(workflow.steps)) {
    const base = {
      tx: (fn: Parameters<typeof runTxStep>[1], use?: { id?: string }) => runTxStep({ state, declaration, use }, fn),
      call: (fn: Parameters<typeof runCallStep>[1], use?: { id?: string }) => runCallStep({ state, declaration, use }, fn),
    };
    result[property] = Object.freeze(Object.assign(base, ...extensions.map((extend) => extend(state, declaration, workflow))));
  }
  return Object.freeze(result) as never;
}

function context(state: RunState, workflow: Workflow): RunContext {
  const record = (kind: '$now' | '$uuid', label: string, make: () => string): string => {
    assertValidKey(label, `label of ctx.${kind.slice(1)}()`);
    const instance = `${kind}[${label}]`;
    const key = state.record.use(
      instance,
      `ctx.${kind.slice(1)}('${label}') was used twice in one run; give each use its own label, ` +
        `e.g. ctx.${kind.slice(1)}('shipped-at').`,
    );
    const done = state.record.finished.get(instance);
    if (done) return JSON.parse(done.body) as string;
    state.control.throwIfStopped();
    state.record.reach(instance);
    const value = make();
    state.recordPending({ key, name: instance, ok: true, body: JSON.stringify(value), attempts: 1 });
    return value;
  };
  return Object.freeze({
    scope: state.lease.scope,
    key: state.lease.key,
    rootKey: state.rootKey,
    workflow: workflow.name,
    version: workflow.version,
    get signal() {
      return state.control.signal;
    },
    now: (label = 'now') => new Date(record('$now', label, () => new Date().toISOString())),
    uuid: (label = 'uuid') => record('$uuid', label, () => crypto.randomUUID()),
  });
}
