/**
 * The state of one execution of one run in this process: its lease, the
 * steps it found finished, the step records waiting for the next commit, and
 * the switch that stops it at the next step boundary.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { Transaction } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { childKey } from '../keys/derive.js';
import type { Lease } from '../ledger/types.js';
import { RunStopped, type StopReason } from './errors.js';
import type { FinishedStep, RunTrace } from './sql/load-run.js';
import type { StepRow } from './sql/step-rows.js';
import type { KeyRef } from '../ledger/types.js';
import type { Workflow } from './define.js';
import type { WorkflowRegistry } from './registry.js';
import type { RunWait } from '../lifecycle/wait.js';
import type { AttemptRecord, AttemptWrite } from './effects/attempts.js';
import type { Logger } from '../log/logger.js';
import type { StepLimits } from './step-limits.js';

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
}

/** What steps need of the engine that runs them: the workflows it knows, and runs it starts or wakes. */
export interface EngineHooks {
  readonly registry: WorkflowRegistry;
  /** Executes, in the background, a child run this process has just claimed and committed. */
  executeChild(child: ChildStart): void;
  /** Continues a parked run that is due, in this process, if it runs the run's workflow version. */
  wake(ref: KeyRef): void;
}

/** A child run claimed by its parent's step, to execute under `lease`. */
export interface ChildStart {
  lease: Lease;
  workflow: Workflow;
  input: unknown;
  rootKey: string;
  parentRun: string;
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
}

export class RunState {
  readonly deps: RunDeps;
  readonly lease: Lease;
  readonly rootKey: string;
  /** Finished steps by instance name: loaded on resume, added as steps commit. */
  readonly finished: Map<string, FinishedStep>;
  /** The wait this run was parked in when it was loaded (its waiting step reads it). */
  readonly wait: RunWait | undefined;
  /** stepkey's clock (ms) when the run was loaded; undefined for a run this execution started. */
  readonly loadedAtMs: number | undefined;
  /** A child run's parent, which its end wakes. */
  readonly parentRun: string | null;
  /** The loaded run's trace (see RunStateOptions.trace). */
  readonly trace: RunTrace | undefined;
  /**
   * This execution's trace context, to be stored with the run by its next
   * commit (see RunStateOptions.storesTrace); undefined once stored, or when
   * there is none to store.
   */
  traceToStore: string | undefined;
  readonly storesTrace: boolean;
  /** The wait this execution parked the run in. */
  #parked: RunWait | undefined;
  /** Records with no writes of their own (ctx.now, ctx.uuid, a woken timer's end) that go out with the next commit. */
  pending: StepRow[] = [];
  /**
   * The effect record of this run's outside calls, by step instance name:
   * loaded with the run, and kept up to date as this execution writes it.
   */
  readonly attempts: Map<string, AttemptRecord[]>;
  /** Attempt writes (ends, resolutions) that go out with the next commit. */
  pendingAttempts: AttemptWrite[] = [];
  /** Each step's place in the run's record, in the order the run reached them. */
  readonly #seqs = new Map<string, number>();
  #nextSeq: number;
  /**
   * The open transaction that holds the run's uncommitted start (its claim),
   * when the start is folded into the first step: that step's commit is the
   * run's first. Undefined once the start has committed.
   */
  opening: Transaction | undefined;
  /** The transaction that carries the run's start, kept to know whether it has committed. */
  readonly #start: Transaction | undefined;
  /**
   * The last tx step's transaction, its writes done and its row written,
   * waiting to commit at the next step boundary — so that a run that ends
   * right after it commits its completion in the same transaction.
   */
  deferred: { transaction: Transaction; rows: StepRow[]; label: string } | undefined;
  /** The run's input (a step limit's partitionBy reads it); set when the execution begins. */
  input: unknown;
  /** The step holding a limit slot, given back in the commit that records it (src/flow/limit-release.ts). */
  limitHold: { step: string } | undefined;
  readonly #used = new Set<string>();
  /** Made when something first listens (most runs never read their signal). */
  #controller: AbortController | undefined;
  #stopReason: StopReason | undefined;
  #halted: { error: unknown } | undefined;
  /** Steps of one run execute one at a time, in the order they were called. */
  #queue: Promise<unknown> = Promise.resolve();
  /** Set once the run's outcome is being recorded: no step may start after it. */
  ended = false;
  /** When the run's folded start was claimed (its lease was computed then), by stepkey's clock (epoch ms plus the clock's offset). */
  readonly claimedAt: number;
  /** Until when (epoch ms) this execution counts as making progress; the heartbeat renews its lease only until then. */
  #aliveUntil: number;
  /** Until when (epoch ms, this process's clock, on the safe side) its lease is known to be held: the last renewal sent plus a lease. */
  heldUntil: number;

  constructor(deps: RunDeps, lease: Lease, options: RunStateOptions) {
    this.deps = deps;
    this.claimedAt = Date.now() + deps.clock.offsetMs;
    this.lease = lease;
    this.rootKey = options.rootKey;
    this.finished = options.finished;
    this.opening = options.opening;
    this.#start = options.opening;
    this.wait = options.wait;
    this.loadedAtMs = options.loadedAtMs;
    this.parentRun = options.parentRun ?? null;
    this.trace = options.trace;
    this.storesTrace = options.storesTrace ?? (options.trace !== undefined && options.trace.context === null);
    this.attempts = options.attempts ?? new Map();
    this.#nextSeq = 1 + Math.max(0, ...[...options.finished.values()].map((step) => step.seq ?? 0));
    this.#aliveUntil = Date.now() + deps.leaseMs;
    this.heldUntil = this.#aliveUntil;
  }

  /** Gives the step (or recorded value) `instance` the next place in the run's record. */
  reach(instance: string): void {
    if (!this.#seqs.has(instance)) this.#seqs.set(instance, this.#nextSeq++);
  }

  /** The place in the run's record of a step this execution reached. */
  seqOf(instance: string): number | null {
    return this.#seqs.get(instance) ?? null;
  }

  /** Takes the attempt writes waiting for a commit. */
  takePendingAttempts(): AttemptWrite[] {
    const writes = this.pendingAttempts;
    this.pendingAttempts = [];
    return writes;
  }

  /** Applies attempt writes that have committed to the in-memory record. */
  applyAttempts(writes: readonly AttemptWrite[], nowMs: number): void {
    for (const write of writes) {
      const list = this.attempts.get(write.step) ?? [];
      this.attempts.set(write.step, list);
      const record = list.find((candidate) => candidate.attempt === write.attempt);
      switch (write.write) {
        case 'start':
        case 'once':
          if (record) break;
          list.push({
            step: write.step,
            attempt: write.attempt,
            kind: write.kind,
            leaseToken: this.lease.token,
            startedAtMs: nowMs,
            endedAtMs: write.write === 'once' ? nowMs : null,
            outcome: write.write === 'once' ? 'ok' : null,
            error: null,
            resolution: null,
            resolvedOutput: null,
          });
          break;
        case 'end':
          if (record && record.leaseToken === this.lease.token && record.endedAtMs === null) {
            record.endedAtMs = record.startedAtMs + write.durationMs;
            record.outcome = write.outcome;
            record.error = write.error;
          }
          break;
        case 'resolve':
          if (record && record.resolution === null) {
            record.resolution = write.resolution;
            record.resolvedOutput = write.output;
          }
          break;
      }
    }
  }
  /**
   * Marks progress: the execution promises to reach its next mark within
   * `ms` — a lease for work with no bound of its own (waiting for a
   * connection, code between steps, a commit), an attempt's timeout plus a
   * lease while an attempt runs.
   */
  progress(ms: number): void {
    this.#aliveUntil = Date.now() + ms;
  }

  /** Whether the execution missed its mark: it is not renewed, and another process takes the run over. */
  stalled(now = Date.now()): boolean {
    return now > this.#aliveUntil;
  }

  /** Whether the run's row exists for others yet (its start has committed). */
  get startPending(): boolean {
    return this.#start !== undefined && !this.#start.committed;
  }

  /** Takes the deferred step transaction, if any: the caller now commits it. */
  takeDeferred(): RunState['deferred'] {
    const deferred = this.deferred;
    this.deferred = undefined;
    return deferred;
  }

  /** Takes the open start transaction, if any: the caller now commits it. */
  takeOpening(): Transaction | undefined {
    const opening = this.opening;
    this.opening = undefined;
    return opening;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#stopReason) this.#controller.abort(new RunStopped(this.#stopReason));
    }
    return this.#controller.signal;
  }

  get stopReason(): StopReason | undefined {
    return this.#stopReason;
  }

  /** Stops the run at its next step boundary (and aborts calls in flight). */
  stop(reason: StopReason): void {
    if (this.#stopReason) return;
    this.#stopReason = reason;
    this.#controller?.abort(new RunStopped(reason));
  }

  /**
   * Ends this execution with `error`, for good: every later step boundary
   * throws it again, so that workflow code catching it cannot carry on (a
   * failed commit must not be followed by the run's completion).
   */
  halt(error: unknown): void {
    this.#halted ??= { error };
  }

  get halted(): { error: unknown } | undefined {
    return this.#halted;
  }

  /**
   * The run has parked (its park committed): this execution ends at once —
   * workflow code unwinds through RunStopped('parked') — and the run
   * continues, in whatever process, once it is due.
   */
  park(wait: RunWait): RunStopped {
    this.#parked = wait;
    this.stop('parked');
    return new RunStopped('parked');
  }

  get parked(): RunWait | undefined {
    return this.#parked;
  }

  /** The recorded wait of the step `instance`, if the run was parked there. */
  recordedWait(instance: string, kind: RunWait['kind']): RunWait | undefined {
    return this.wait && this.wait.step === instance && this.wait.kind === kind ? this.wait : undefined;
  }

  throwIfStopped(): void {
    if (this.#stopReason) throw new RunStopped(this.#stopReason);
    if (this.#halted) throw this.#halted.error;
  }

  /** Runs `work` after every step called before it has finished. */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(work);
    this.#queue = result.catch(() => undefined);
    return result;
  }

  /** Marks an instance name used in this execution; a second use is an error with `duplicateMessage`. */
  use(instanceName: string, duplicateMessage: string): string {
    if (this.#used.has(instanceName)) {
      throw new StepkeyError('duplicate_step', duplicateMessage, { details: { step: instanceName } });
    }
    this.#used.add(instanceName);
    return childKey(this.rootKey, instanceName);
  }

  /** Records a finished step or value now, to be written by the next commit (see `pending`). */
  recordPending(row: StepRow): void {
    this.pending.push(row);
    this.finished.set(row.name, row);
  }

  /** Takes the pending records for a commit; they are put back if the commit fails (see commitWaiting). */
  takePending(): StepRow[] {
    const rows = this.pending;
    this.pending = [];
    return rows;
  }
}
