/**
 * The state of one execution of one run in this process: the run it executes
 * (its lease, root key, parent, trace) and three parts, one concern each —
 * its execution control (run/control.ts: whether it may go on), its commit
 * buffer (run/commit-buffer.ts: what waits for the next commit) and its step
 * record (run/step-record.ts: what it found finished and has recorded). It
 * is built in one place, `newRunState`.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { Transaction } from '../db/transaction.js';
import type { Lease } from '../ledger/types.js';
import type { FinishedStep, RunTrace } from './sql/load-run.js';
import type { AttemptRecord } from './effects/attempts.js';
import type { StepRow } from './sql/step-rows.js';
import { ExecutionControl } from './run/control.js';
import { CommitBuffer } from './run/commit-buffer.js';
import { StepRecord } from './run/step-record.js';
import type { KeyRef } from '../ledger/types.js';
import type { Workflow } from './define.js';
import type { WorkflowRegistry } from './registry.js';
import type { RunWait } from '../lifecycle/wait.js';
import type { Logger } from '../log/logger.js';
import type { StepLimits } from './step-limits.js';
import type { SlotHandOff } from './slot-handoff.js';
import type { ChildQueues } from './waits/queued-child.js';

export interface RunDeps {
  sql: Sql;
  clock: Clock;
  retentionMs: number;
  leaseMs: number;
  hooks: EngineHooks;
  /** Where takeovers, resumes, retries and unknown outcomes are logged. */
  log: Logger;
  /** The step limits the engine registers (src/flow), if any. */
  limits?: StepLimits;
  /** The queue slot's hand-over at a run's end (src/flow), if the engine registers queues. */
  slotHandOff?: SlotHandOff;
}

/** What steps need of the engine that runs them: the workflows it knows, and runs it starts or wakes. */
export interface EngineHooks {
  readonly registry: WorkflowRegistry;
  /** Executes, in the background, a child run this process has just claimed and committed. */
  executeChild(child: ChildStart): void;
  /** Continues a parked run that is due, in this process, if it runs the run's workflow version. */
  wake(ref: KeyRef): void;
  /** The queues a child can be started on (src/flow registers them); absent when the engine registers none. */
  readonly queues?: ChildQueues | undefined;
}

/** A child run claimed by its parent's step, to execute under `lease`. */
export interface ChildStart {
  lease: Lease;
  workflow: Workflow;
  input: unknown;
  rootKey: string;
  parentRun: string;
  /** Its deadline (ms since the epoch, stepkey's clock), if it has one. */
  deadlineAtMs?: number | null;
}

export interface RunStateOptions {
  rootKey: string;
  finished: Map<string, FinishedStep>;
  opening?: Transaction | undefined;
  wait?: RunWait | undefined;
  /** stepkey's clock (ms) when the run was loaded (see LoadedRun.loadedAtMs). */
  loadedAtMs?: number | undefined;
  parentRun?: string | null;
  /** Recorded attempts of its outside calls, by step instance name (loaded with the run). */
  attempts?: Map<string, AttemptRecord[]>;
  /** A loaded run's trace, which this execution's span continues; absent for a new run (its span's parent is the active one). */
  trace?: RunTrace;
  /**
   * The run's row stores no trace context (a new run started outside any
   * span): this execution stores its own span's, so that later executions
   * join its trace. Default: true for a loaded run whose trace has no context.
   */
  storesTrace?: boolean;
  /** The run's deadline (ms since the epoch, stepkey's clock), if it has one. */
  deadlineAtMs?: number | null;
}

export class RunState {
  readonly deps: RunDeps;
  readonly lease: Lease;
  readonly rootKey: string;
  /** A child run's parent, which its end wakes. */
  readonly parentRun: string | null;
  /** The loaded run's trace (see RunStateOptions.trace). */
  readonly trace: RunTrace | undefined;
  readonly storesTrace: boolean;
  /** The run's input (a step limit's partitionBy reads it); set when the execution begins. */
  input: unknown;
  readonly control: ExecutionControl;
  readonly buffer: CommitBuffer;
  readonly record: StepRecord;

  constructor(deps: RunDeps, lease: Lease, options: RunStateOptions) {
    this.deps = deps;
    this.lease = lease;
    this.rootKey = options.rootKey;
    this.parentRun = options.parentRun ?? null;
    this.trace = options.trace;
    this.storesTrace = options.storesTrace ?? (options.trace !== undefined && options.trace.context === null);
    const deadline =
      options.deadlineAtMs === undefined || options.deadlineAtMs === null
        ? undefined
        : { atMs: options.deadlineAtMs, nowMs: () => Date.now() + deps.clock.offsetMs };
    this.control = new ExecutionControl(deps.leaseMs, deadline);
    this.buffer = new CommitBuffer(options.opening);
    this.record = new StepRecord(options.rootKey, {
      finished: options.finished,
      ...(options.attempts ? { attempts: options.attempts } : {}),
      ...(options.wait ? { wait: options.wait } : {}),
      ...(options.loadedAtMs !== undefined ? { loadedAtMs: options.loadedAtMs } : {}),
    });
  }

  /** Records a finished step or value now, to be written by the next commit (see CommitBuffer.pending). */
  recordPending(row: StepRow): void {
    this.buffer.pending.push(row);
    this.record.finished.set(row.name, row);
  }
}

/** Builds the state of one execution: the one place a RunState is made. */
export function newRunState(deps: RunDeps, lease: Lease, options: RunStateOptions): RunState {
  return new RunState(deps, lease, options);
}
