/**
 * Child runs. `child(workflow, input)` starts a child run — a run of its own,
 * in the parent's scope, keyed by a key derived from the step's key
 * (childRunKey), linked to the parent — and parks the parent until the child
 * ends; `startChild` starts
 * one and returns its ref at once. Starting the child and recording the
 * parent's step commit together, so a child is started once even when the
 * parent dies right after. The parent's process executes the child at once;
 * if it dies, a sweeper does. A child's end (completed, errored, failed,
 * cancelled) wakes a parent waiting for it. With `{ queue }` the child is put
 * in line instead, parked for a slot in the same commit, and the queue's
 * dispatch starts it (queued-child.ts).
 */
import { randomUUID } from 'node:crypto';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { faultPoint } from '../../faults/fault-points.js';
import { childKey, newRootKey, stepInstanceName } from '../../keys/derive.js';
import { purposeFingerprint } from '../../keys/fingerprint.js';
import { toJsonText, type StoredError } from '../../ledger/outcome.js';
import type { Workflow } from '../define.js';
import type { RunRef } from '../handles.js';
import type { RunState } from '../run-state.js';
import type { FinishedStep } from '../sql/load-run.js';
import type { StepTarget } from '../steps.js';
import { decodeValue, summarise } from '../values.js';
import { ChildRunError, isChildRunErrorData, type ChildEnd } from './child-error.js';
import type { ResolvedDeadline } from '../../lifecycle/deadline.js';
import { runWait, type WaitDecision } from './settle.js';
import { activeTraceContext } from '../../telemetry/tracing.js';
import { readChildStatement, type ChildRow } from './sql/child-runs.js';
import { insertChildStatement } from '../../lifecycle/child-claim.js';
import { parkStatement } from '../../lifecycle/park.js';
import { slotWait } from '../../lifecycle/slot-wait.js';
import { childOptions, requireChildQueues, type ChildEntry, type ChildOptions, type ChildQueues } from './queued-child.js';

/**
 * The key of the child run a step starts: derived from the step's key (the
 * step's own row is keyed by that one), so unique across tenants and runs
 * like every derived key.
 */
export function childRunKey(stepKey: string): string {
  return childKey(stepKey, '$child');
}

/**
 * The child's claim and what to execute once it commits, or an error for bad
 * input — a child on a queue has its entry computed here too (the queue
 * registered, the priority in range, partitionBy answering), before anything
 * is stored.
 */
function prepareChild(target: StepTarget, where: string, workflow: Workflow, input: unknown, options: ChildOptions | undefined) {
  const { state, declaration } = target;
  const checked = childOptions(where, options);
  const definition = state.deps.hooks.registry.require(workflow);
  const parsed = definition.input.safeParse(input);
  if (!parsed.success) {
    throw new StepkeyError('invalid_input', `${where}: the input of child workflow '${definition.name}' is invalid: ${summarise(parsed.error)}.`, {
      cause: parsed.error,
    });
  }
  let queue: { queues: ChildQueues; entry: ChildEntry; ready: Promise<void> } | undefined;
  const instance = stepInstanceName(declaration.name, checked.id);
  // A step that finished, or whose child exists (the run parked on it), replays without its queue:
  // a process that no longer registers the queue, or a partitionBy that changed, cannot fail it.
  const childExists = state.record.finished.has(instance) || state.record.recordedWait(instance, 'child') !== undefined;
  if (checked.queue !== undefined && !childExists) {
    const queues = requireChildQueues(where, state.deps.hooks.queues, checked.queue);
    const key = childRunKey(childKey(state.rootKey, instance));
    const entry = namingStep(where, () => queues.entry(definition, { scope: state.lease.scope, key }, parsed.data, checked));
    // The queue's settings written to its row (once per engine) before the child goes in line; awaited in the step's decision.
    const ready = queues.ready();
    ready.catch(() => {});
    queue = { queues, entry, ready };
  }
  return { definition, input, parsed: parsed.data as unknown, text: toJsonText(parsed.data, `input of child workflow '${definition.name}'`), queue };
}

type Prepared = ReturnType<typeof prepareChild>;

/** `work()`, its StepkeyError (a queue not registered, a priority out of range) prefixed with the step it came from. */
function namingStep<T>(where: string, work: () => T): T {
  try {
    return work();
  } catch (error) {
    if (!(error instanceof StepkeyError) || error.message.startsWith(where)) throw error;
    throw new StepkeyError(error.code, `${where}: ${error.message}`, { cause: error, details: error.details });
  }
}

/**
 * Claims the child (inserted with a lease of this process's) and arranges its
 * execution after the commit. A child on a queue is put in line and parked
 * for a slot in the same transaction (its lease ends there, unused), and the
 * queue is dispatched after the commit: it starts when the queue gives it a
 * slot, here or in any process that serves the queue.
 */
function startIt(state: RunState, prepared: Prepared, childKey: string, parentParks: boolean): Pick<WaitDecision, 'statements' | 'after'> {
  const { scope } = state.lease;
  const token = randomUUID();
  const rootKey = newRootKey(scope, childKey);
  const { definition, queue } = prepared;
  const ref = { scope, key: childKey };
  return {
    statements: (q) => [
      insertChildStatement(q, state.deps.clock, {
        scope,
        key: childKey,
        workflow: definition.name,
        version: definition.version,
        fingerprint: purposeFingerprint(definition.name, prepared.input),
        input: prepared.text,
        rootKey,
        parentRun: state.lease.key,
        token,
        leaseMs: state.deps.leaseMs,
        traceContext: activeTraceContext(),
        deadline: definition.deadline,
      }),
      ...(queue ? [...queue.queues.statements(q, ref, queue.entry), parkStatement(q, state.deps.clock, { ...ref, token }, slotWait(queue.entry.queue))] : []),
    ],
    after: () => {
      faultPoint('engine.after-child-start', definition.name);
      if (queue) {
        queue.queues.dispatch(queue.entry.queue, parentParks);
        return;
      }
      state.deps.hooks.executeChild({
        lease: { scope, key: childKey, token },
        workflow: definition,
        input: prepared.parsed,
        rootKey,
        parentRun: state.lease.key,
        deadlineAtMs: deadlineMs(definition.deadline, Date.now() + state.deps.clock.offsetMs),
      });
    },
  };
}

function validInputOrReject<T>(work: () => T): T | Promise<never> {
  try {
    return work();
  } catch (error) {
    return Promise.reject(error);
  }
}

export function childStep(target: StepTarget, workflow: Workflow, input: unknown, use: ChildOptions | undefined): Promise<unknown> {
  const { state, declaration } = target;
  const where = `Step '${declaration.name}'`;
  const prepared = validInputOrReject(() => prepareChild(target, where, workflow, input, use));
  if (prepared instanceof Promise) return prepared;
  const { definition } = prepared;
  const decode = (finished: FinishedStep, instance: string) => {
    if (finished.ok) return decodeValue(finished.body, definition.output, `The result of child workflow '${definition.name}' (step '${instance}')`);
    const stored = JSON.parse(finished.body) as StoredError;
    if (isChildRunErrorData(stored.data)) throw new ChildRunError(stored.data);
    throw Object.assign(new Error(stored.message), { name: stored.name });
  };
  return runWait(
    { ...target, use },
    'child',
    async ({ instance, key: stepKey }, q) => {
      const key = childRunKey(stepKey);
      const [child] = await readChildStatement(q, state.lease.scope, key);
      if (!child) {
        await prepared.queue?.ready;
        return { ...startIt(state, prepared, key, true), park: { kind: 'child', step: instance, for: key, untilMs: null } };
      }
      const ended = childOutcome(child, { scope: state.lease.scope, key, workflow: child.name });
      return ended ? { finish: ended } : { park: { kind: 'child', step: instance, for: key, untilMs: null } };
    },
    decode,
  );
}

export function startChildStep(target: StepTarget, workflow: Workflow, input: unknown, use: ChildOptions | undefined): Promise<unknown> {
  const { declaration } = target;
  const prepared = validInputOrReject(() => prepareChild(target, `Step '${declaration.name}'`, workflow, input, use));
  if (prepared instanceof Promise) return prepared;
  const { state } = target;
  const refOf = (key: string): RunRef => ({ scope: state.lease.scope, key });
  return runWait(
    { ...target, use },
    'startChild',
    async ({ key: stepKey }, q) => {
      const key = childRunKey(stepKey);
      const body = toJsonText({ scope: state.lease.scope, key }, 'child ref');
      const [child] = await readChildStatement(q, state.lease.scope, key);
      if (!child) await prepared.queue?.ready;
      return child ? { finish: { ok: true, body } } : { ...startIt(state, prepared, key, false), finish: { ok: true, body } };
    },
    (finished) => ({ ...refOf((JSON.parse(finished.body) as { key: string }).key), workflow: prepared.definition }),
  );
}

/** A child that has ended, as its parent's step records it; undefined while it runs or waits. */
function childOutcome(child: ChildRow, ref: { scope: string; key: string; workflow: string }): { ok: boolean; body: string } | undefined {
  const end = (status: ChildEnd, error: StoredError) => ({
    ok: false,
    body: toJsonText(
      { name: 'ChildRunError', message: new ChildRunError({ child: ref, status, error }).message, code: `child_${status}`, data: { child: ref, status, error } },
      'error',
    ),
  });
  switch (child.status) {
    case 'completed':
      return child.outcome_ok ? { ok: true, body: child.outcome ?? '' } : end('errored', JSON.parse(child.outcome ?? '{}'));
    case 'cancelled':
    case 'deadline_exceeded':
      return end(child.status, JSON.parse(child.outcome ?? '{}'));
    case 'failed':
      return end('failed', JSON.parse(child.last_error ?? '{}'));
    default:
      return undefined;
  }
}

/** A deadline in ms since the epoch, as this process reads it (the row's, from the database's clock, is what ends the run). */
function deadlineMs(deadline: ResolvedDeadline | undefined, nowMs: number): number | null {
  if (!deadline) return null;
  return 'inMs' in deadline ? nowMs + deadline.inMs : deadline.atMs;
}
