/**
 * What the engine's modules share: its database and clock, the workflows it
 * registers, its settings, the dependencies every execution gets, flow
 * control, and the modules themselves — the runs this process executes
 * (local-runs.ts) and its wakes (waking.ts).
 */
import type { Sql } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { Dispatcher } from '../flow/dispatcher.js';
import { FlowControl } from '../flow/flow-control.js';
import { LimitRegistry } from '../flow/limit-registry.js';
import { childQueues } from '../flow/child-queues.js';
import { resolveLogger } from '../log/logger.js';
import { enqueueStep } from '../outbox/enqueue-step.js';
import type { StepHandleExtension } from '../workflow/executor.js';
import { WorkflowRegistry } from '../workflow/registry.js';
import type { RunDeps } from '../workflow/run-state.js';
import { waitStepKinds } from '../workflow/waits/step-kinds.js';
import { LocalRuns } from './local-runs.js';
import { engineSettings, type EngineOptions, type EngineSettings } from './options.js';
import { Waker } from './waking.js';

export interface EngineCore {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly registry: WorkflowRegistry;
  readonly settings: EngineSettings;
  readonly deps: RunDeps;
  readonly flow: FlowControl;
  readonly dispatcher: Dispatcher;
  readonly extensions: readonly StepHandleExtension[];
  readonly onError: (error: unknown, context: string) => void;
  /** Set once the engine shuts down: it starts, wakes and sweeps nothing more. */
  readonly closing: boolean;
  readonly runs: LocalRuns;
  readonly waker: Waker;
  /** The workflow versions this process executes. */
  versions(): { name: string; version: number }[];
}

/** Runs database work, its errors translated into stepkey's (`action` says what was being done). */
export async function inDatabase<T>(action: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw translateDatabaseError(error, action);
  }
}

/** Wires an engine's parts together: the one place they are made. */
export function buildCore(sql: Sql, options: EngineOptions): EngineCore & { closing: boolean } {
  const settings = engineSettings(options, sql.options.max);
  const clock = options.clock ?? systemClock;
  const registry = new WorkflowRegistry(options.workflows ?? []);
  const core = { sql, clock, registry, settings, closing: false } as EngineCore & { closing: boolean };
  const flow = new FlowControl(sql, clock, options.queues ?? []);
  const deps: RunDeps = {
    sql,
    clock,
    retentionMs: settings.retentionMs,
    leaseMs: settings.leaseMs,
    log: resolveLogger(options.logger),
    limits: new LimitRegistry(sql, options.limits ?? [], registry.all()),
    hooks: {
      registry,
      executeChild: (child) => core.runs.executeChild(child),
      wake: (ref) => core.waker.wake(ref),
      queues: flow.enabled ? childQueues(flow, clock, (queue, freeing) => core.dispatcher.dispatchQueue(queue, freeing)) : undefined,
    },
  };
  const dispatcher = new Dispatcher(
    {
      sql,
      clock,
      leaseMs: settings.leaseMs,
      maxConcurrentRuns: settings.maxConcurrentRuns,
      get activeRuns() {
        return core.runs.size;
      },
      get closing() {
        return core.closing;
      },
      versions: () => core.versions(),
      execute: (lease, own, fresh) =>
        core.runs.trackTaken(lease, () =>
          own
            ? core.runs.execute(lease, own.definition, own.input, { rootKey: own.rootKey, finished: new Map(), deadlineAtMs: own.deadlineAtMs ?? null })
            : core.runs.resumeOwned(lease, fresh),
        ),
      taking: (work) => core.runs.taking(work),
      onError: (error, context) => core.onError(error, context),
    },
    flow,
  );
  deps.slotHandOff = dispatcher;
  Object.assign(core, {
    deps,
    flow,
    dispatcher,
    extensions: [enqueueStep, ...(options.stepExtensions ?? []), waitStepKinds],
    onError: options.onError ?? ((error: unknown, context: string) => console.error(`stepkey: ${context}:`, error)),
    versions: () => registry.all().map(({ name, version }) => ({ name, version })),
    runs: new LocalRuns(core),
    waker: new Waker(core),
  });
  return core;
}
