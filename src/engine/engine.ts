/**
 * The engine: starts runs, resumes them, answers duplicates, and keeps the
 * leases of the runs this process executes.
 *
 *   start    claim the run (one statement, committed) and execute it in the
 *            background; resolves once the run's row exists
 *   attempt  claim and execute now; a duplicate gets the stored outcome, "in
 *            progress" or "mismatch" instead of an exception
 *   run      attempt, waiting for a run that executes elsewhere
 *   resume   continue a failed run, or one whose process died
 *   cancel   stop a run at its next step boundary, stored as cancelled
 *
 * A heartbeat extends every lease this process holds in one statement; a
 * sweeper (startSweeper) resumes runs whose lease expired, so a killed run
 * continues within about one lease. Starting a run never touches
 * graphile-worker.
 */
import type { z } from 'zod';
import { connect, type Database, type Sql } from '../db/connect.js';
import { Transaction } from '../db/transaction.js';
import { type Clock, systemClock } from '../db/clock.js';
import { DEFAULT_LEASE_MS } from '../db/lease.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { newRootKey, storedRootKey } from '../keys/derive.js';
import { legacyPurposeFingerprint, purposeFingerprint } from '../keys/fingerprint.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import { probeKey } from '../ledger/claim.js';
import { claimRun, claimVacantRun } from '../lifecycle/claim.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import { serializeError, toJsonText, type StoredError } from '../ledger/outcome.js';
import { failStatement } from '../ledger/sql/finish.js';
import { readRow } from '../ledger/sql/read.js';
import type { ClaimRequest, ClaimResult, KeyRef, Lease, LedgerKind } from '../ledger/types.js';
import { takesLimits, type Workflow, type WorkflowResult } from '../workflow/define.js';
import { executeRun, wakeParentStatements, type Settled, type StepHandleExtension } from '../workflow/executor.js';
import { WorkflowRegistry } from '../workflow/registry.js';
import { readRunInfo, type RunInfo } from '../read/run-info.js';
import { RunState, type RunDeps } from '../workflow/run-state.js';
import { cancelRunAction } from '../actions/cancel-run.js';
import { rerunAction } from '../actions/rerun-run.js';
import { resolveRunAction } from '../actions/resolve-run.js';
import type { ActionBy } from '../actions/sql/audit.js';
import { isUnavailable, type StopReason } from '../workflow/errors.js';
import { loadRun, type FinishedStep } from '../workflow/sql/load-run.js';
import { expireRunLease, heartbeatRuns, stillParked, sweepExpiredRuns, wakeDueRun } from '../lifecycle/leases.js';
import { summarise } from '../workflow/values.js';
import { mismatchError, parkedWait, replayFields, settledFromRow, toAttempt, unwrap, type RunAttempt } from '../workflow/outcomes.js';
import type { EventInput, EventName } from '../workflow/define.js';
import type { RunRef } from '../workflow/handles.js';
import type { ChildStart, RunStateOptions } from '../workflow/run-state.js';
import { sendEvent, type Sent } from '../workflow/waits/send.js';
import { waitStepKinds } from '../workflow/waits/step-kinds.js';
import type { RunWaitView } from '../lifecycle/wait.js';
import { enqueueStep } from '../outbox/enqueue-step.js';
import { resolveLogger, type Logger } from '../log/logger.js';
import type { Resolution, Resolved } from '../workflow/effects/resolve.js';
import type { RerunOptions } from '../workflow/rerun/rerun.js';
import { instrument } from '../telemetry/instrumentation.js';
import { activeTraceContext } from '../telemetry/tracing.js';
import { WakeTimers } from '../workflow/waits/wake-timers.js';
import type { Queue } from '../flow/define-queue.js';
import type { Limit } from '../flow/define-limit.js';
import { FlowControl } from '../flow/flow-control.js';
import { Dispatcher } from '../flow/dispatcher.js';
import { LimitRegistry } from '../flow/limit-registry.js';
import type { EnqueueOptions } from '../flow/enqueue.js';
import { queuedRun } from '../flow/queued-run.js';

export interface EngineOptions {
  /** A database from connect(), or a URL (the engine then owns its pool). */
  database: Database | string;
  /** Every workflow version this engine may start or resume. */
  workflows: readonly Workflow[];
  clock?: Clock;
  /** Lease of a running run; a killed run resumes about this long after (default 8 s, env STEPKEY_LEASE_MS). */
  leaseMs?: number;
  /** How often leases are extended (default a third of the lease). */
  heartbeatMs?: number;
  /** How long a finished run's key is kept (default 24 h). */
  retentionMs?: number;
  /** How often the sweeper looks for expired leases (default 1 s, env STEPKEY_SWEEP_INTERVAL_MS). */
  sweepIntervalMs?: number;
  /** Runs the sweeper may execute at once in this process (default 8; each holds a pooled connection while it writes). */
  maxConcurrentRuns?: number;
  /** Queues this engine enqueues on and dispatches (see defineQueue). */
  queues?: readonly Queue<any>[];
  /** Limits on outside providers that steps take from (see defineLimit); a step that names one not registered is refused here. */
  limits?: readonly Limit<any>[];
  /** Step kinds added by other layers (the outbox's enqueue). */
  stepExtensions?: readonly StepHandleExtension[];
  /** Background failures (heartbeat, sweeper); default: printed to stderr. */
  onError?: (error: unknown, context: string) => void;
  /**
   * Where takeovers, resumes, retries and unknown outcomes are logged, as JSON
   * lines: a pino logger (or anything with its info/warn/error/debug), false
   * for none. Default: pino if it is installed (STEPKEY_LOG_LEVEL, default info).
   */
  logger?: Logger | false;
}

export interface RunOptions {
  /** Fingerprint to use instead of (workflow name + input): a tRPC procedure passes path + input. */
  fingerprint?: string;
  /** With `fingerprint`: its v1 form, for keys stored before fingerprints had versions. */
  legacyFingerprint?: () => string;
  /** Volatile input fields left out of the fingerprint, e.g. ['meta.traceId']. */
  exclude?: string[];
}

export type { RunAttempt } from '../workflow/outcomes.js';

export interface RunHandle<Result, W extends Workflow = Workflow> extends KeyRef {
  /** Its workflow: a handle is a typed ref for `engine.send`. */
  readonly workflow: W;
  /** What the run's step keys derive from; null when another call's start of it had not committed yet. */
  readonly rootKey: string | null;
  /** false when the key already had a run (this call joined or replayed it). */
  readonly started: boolean;
  /** The run's result, waiting for it wherever it executes. */
  result(): Promise<Result>;
}

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

/** A run's fingerprint and, computed when a stored row needs it, its v1 form. */
interface Fingerprints {
  fingerprint: string;
  legacyFingerprint: () => string;
}

const envNumber = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};

const idOf = (ref: KeyRef) => `${ref.scope}\u0000${ref.key}`;

/** Runs parked here on a wait due within this long get a prompt wake at its time (later ones: the sweep). */
const WAKE_HORIZON_MS = 60_000;

export class Engine {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly registry: WorkflowRegistry;
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly sweepIntervalMs: number;
  readonly maxConcurrentRuns: number;
  readonly #deps: RunDeps;
  readonly #flow: FlowControl;
  readonly #dispatcher: Dispatcher;
  readonly #ownedDatabase: Database | undefined;
  readonly #extensions: readonly StepHandleExtension[];
  readonly #onError: (error: unknown, context: string) => void;
  readonly #states = new Map<string, RunState>();
  readonly #running = new Map<string, Promise<Settled>>();
  /** Runs woken while their execution here was still ending (it had just parked). */
  readonly #pendingWakes = new Set<string>();
  /** Prompt wakes of the runs parked here on a time (waits/wake-timers.ts). */
  readonly #wakeTimers: WakeTimers;
  /** Wakes whose take is in flight: room they hold until the run they take is running. */
  #waking = 0;
  readonly #heartbeat: NodeJS.Timeout;
  readonly #heartbeatMs: number;
  #sweeper: NodeJS.Timeout | undefined;
  #sweeping = false;
  /** The last sweep filled every free slot: more due work is likely waiting. */
  #backlog = false;
  #closing = false;

  constructor(options: EngineOptions) {
    const engine = this;
    const database = typeof options.database === 'string' ? connect(options.database) : options.database;
    this.#ownedDatabase = typeof options.database === 'string' ? database : undefined;
    this.sql = database.sql;
    this.clock = options.clock ?? systemClock;
    this.registry = new WorkflowRegistry(options.workflows ?? []);
    this.leaseMs = positive('leaseMs', options.leaseMs ?? envNumber('STEPKEY_LEASE_MS'), DEFAULT_LEASE_MS);
    this.retentionMs = positive('retentionMs', options.retentionMs, DEFAULT_RETENTION_MS);
    this.sweepIntervalMs = positive('sweepIntervalMs', options.sweepIntervalMs ?? envNumber('STEPKEY_SWEEP_INTERVAL_MS'), 1_000);
    this.maxConcurrentRuns = positive('maxConcurrentRuns', options.maxConcurrentRuns, 8);
    const heartbeatMs = positive('heartbeatMs', options.heartbeatMs, Math.max(50, Math.floor(this.leaseMs / 3)));
    this.#heartbeatMs = heartbeatMs;
    this.#extensions = [enqueueStep, ...(options.stepExtensions ?? [])];
    this.#onError = options.onError ?? ((error, context) => console.error(`stepkey: ${context}:`, error));
    this.#extensions = [...this.#extensions, waitStepKinds];
    this.#flow = new FlowControl(this.sql, this.clock, options.queues ?? []);
    this.#dispatcher = new Dispatcher(
      {
        sql: this.sql,
        clock: this.clock,
        leaseMs: this.leaseMs,
        maxConcurrentRuns: this.maxConcurrentRuns,
        get activeRuns() {
          return engine.activeRuns;
        },
        get closing() {
          return engine.#closing;
        },
        versions: () => this.#versions(),
        execute: (lease, own) =>
          this.#track(lease, () =>
            own ? this.#execute(lease, own.definition, own.input, { rootKey: own.rootKey, finished: new Map() }) : this.#resumeOwned(lease),
          ),
        onError: (error, context) => this.#onError(error, context),
      },
      this.#flow,
    );
    this.#deps = {
      sql: this.sql,
      clock: this.clock,
      retentionMs: this.retentionMs,
      leaseMs: this.leaseMs,
      log: resolveLogger(options.logger),
      limits: new LimitRegistry(this.sql, options.limits ?? [], this.registry.all()),
      hooks: {
        registry: this.registry,
        executeChild: (child) => this.#executeChild(child),
        wake: (ref) => this.#wake(ref),
      },
    };
    this.#wakeTimers = new WakeTimers({
      wake: (ref) => this.#wake(ref, (missed) => this.#afterTimerMiss(missed)),
      now: () => Date.now() + this.clock.offsetMs,
      horizonMs: WAKE_HORIZON_MS,
    });
    this.#heartbeat = setInterval(() => void this.#beat(), heartbeatMs);
    this.#heartbeat.unref();
  }

  /**
   * The queue registered as `queue` (an object made by defineQueue, or a
   * name); throws `invalid_options` naming the registered queues otherwise.
   */
  requireQueue(queue: Queue | string): Queue {
    return this.#flow.require(queue);
  }

  /** Runs executing in this process right now. */
  get activeRuns(): number {
    return this.#running.size;
  }

  /** Claims the run and executes it in the background; resolves once the run's row has committed. */
  async start<W extends Workflow>(
    workflow: W,
    ref: KeyRef,
    input: InputOf<W>,
    options: RunOptions = {},
  ): Promise<RunHandle<WorkflowResult<W>, W>> {
    const begun = await this.#begin(workflow, ref, input, options, false);
    if (begun.kind === 'mismatch') throw mismatchError(ref, begun.existing);
    if (begun.kind === 'executing') begun.done.catch(() => {});
    return {
      workflow,
      scope: ref.scope,
      key: ref.key,
      rootKey: begun.rootKey,
      started: begun.kind === 'executing' && !begun.resumed,
      result: () => this.#result(ref, begun.fingerprints) as Promise<WorkflowResult<W>>,
    };
  }

  /** Claims the run and executes it now; duplicates get the stored outcome, in_progress or mismatch. */
  async attempt<W extends Workflow>(
    workflow: W,
    ref: KeyRef,
    input: InputOf<W>,
    options: RunOptions = {},
  ): Promise<RunAttempt<WorkflowResult<W>>> {
    const begun = await this.#begin(workflow, ref, input, options, true);
    switch (begun.kind) {
      case 'mismatch':
        return { state: 'mismatch', existing: begun.existing };
      case 'in_progress':
        return { state: 'in_progress', retryAfterMs: begun.retryAfterMs };
      case 'settled':
        if (begun.settled.state === 'waiting') this.#wakeIfDue(ref, begun.settled.wait);
        return toAttempt(this.registry, begun.settled, true);
      case 'executing':
        return toAttempt(this.registry, await begun.done, false);
    }
  }

  /**
   * Runs the workflow to its result. A run that executes elsewhere is waited
   * for, claiming again every so often: a mismatch, a replay or — once its
   * lease has run out — a takeover are answered as they come.
   */
  async run<W extends Workflow>(
    workflow: W,
    ref: KeyRef,
    input: InputOf<W>,
    options: RunOptions = {},
  ): Promise<WorkflowResult<W>> {
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      const begun = await this.#begin(workflow, ref, input, options, true);
      if (begun.kind === 'mismatch') throw mismatchError(ref, begun.existing);
      if (begun.kind === 'settled' && begun.settled.state !== 'waiting') {
        return unwrap(this.registry, ref, begun.settled) as WorkflowResult<W>;
      }
      if (begun.kind === 'executing') {
        const settled = await begun.done;
        if (settled.state === 'waiting') return this.#result(ref, begun.fingerprints) as Promise<WorkflowResult<W>>;
        if (settled.state !== 'stopped' || settled.reason === 'shutting_down' || settled.reason === 'unavailable') {
          return unwrap(this.registry, ref, settled) as WorkflowResult<W>;
        }
        continue; // another process has it now
      }
      if (begun.kind === 'settled') return this.#result(ref, begun.fingerprints) as Promise<WorkflowResult<W>>;
      const local = this.#running.get(idOf(ref));
      if (local) await local.catch(() => undefined);
      else await new Promise((resolve) => setTimeout(resolve, Math.max(20, Math.min(begun.retryAfterMs, delay))));
    }
  }

  /**
   * Puts a run on a queue: it starts when the queue has a slot for it — at
   * once, here, if one is free — on any process that serves the queue
   * (src/flow). Idempotent by `ref`: the same ref with another queue,
   * priority or input is a mismatch.
   */
  async enqueue<W extends Workflow>(
    workflow: W,
    ref: KeyRef,
    input: InputOf<W>,
    options: EnqueueOptions & RunOptions,
  ): Promise<RunHandle<WorkflowResult<W>, W> & { queued: boolean; requeued: boolean }> {
    if (this.#closing) throw new StepkeyError('shutting_down', 'The engine is shutting down and starts no new runs.');
    assertValidRef(ref);
    const definition = this.registry.require(workflow);
    const run = queuedRun(this.#flow, definition, ref, input, options);
    const fingerprints = this.#fingerprints(definition.name, run.fingerprinted, run.validatedFingerprinted, options);
    const { claim, own, rootKey: root, queued, requeued } = await this.#dispatcher.enqueue(definition, ref, run, fingerprints);
    if (claim.state === 'mismatch') throw mismatchError(ref, claim.existing);
    return {
      workflow,
      scope: ref.scope,
      key: ref.key,
      rootKey: own ? root : queuedRootKey(ref, claim),
      started: own,
      queued,
      requeued,
      result: () => this.#result(ref, fingerprints) as Promise<WorkflowResult<W>>,
    };
  }

  /** Continues a run that failed, or whose process died, from its last finished step. */
  async resume(ref: KeyRef): Promise<RunAttempt<unknown>> {
    assertValidRef(ref);
    const row = await this.#db('reading a run', () => readRow(this.sql, ref));
    if (!row || row.kind !== 'run') throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
    const claim = await this.#db('resuming a run', () =>
      claimRun(this.sql, this.clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: this.leaseMs, mode: 'lock' }),
    );
    if (claim.state === 'vacant') throw new StepkeyError('run_not_found', `Run '${ref.key}' in scope '${ref.scope}' is gone (expired).`);
    if (claim.state === 'owned') {
      const settled = await this.#track(claim.lease, () => this.#resumeOwned(claim.lease));
      return toAttempt(this.registry, settled, false);
    }
    if (claim.state === 'replay') {
      return toAttempt(this.registry, settledFromRow(replayFields(row.name ?? '', claim.outcome, row.version)), true);
    }
    if (claim.state === 'in_progress') return { state: 'in_progress', retryAfterMs: claim.retryAfterMs };
    if (claim.state === 'waiting') {
      this.#dispatcher.afterRequeue(claim);
      return toAttempt(this.registry, { state: 'waiting', wait: parkedWait(claim.wait) }, !claim.resumed);
    }
    return { state: 'mismatch', existing: claim.existing };
  }

  /**
   * Sends an event to a run: kept in the run's mailbox for `topic` (first in,
   * first out) until a `waitForEvent` of it consumes it, and a run waiting
   * for it is woken — here at once when this process runs its version,
   * otherwise by the next sweep. `key` is the sender's idempotency key: the
   * same key again delivers nothing more; with another payload it is a
   * mismatch. The payload is checked against the event's schema, declared on
   * the run's workflow version, before anything is stored.
   */
  async send<W extends Workflow, T extends EventName<W>>(
    ref: RunRef<W>,
    topic: T,
    payload: EventInput<W, T>,
    options: { key: string },
  ): Promise<Sent> {
    assertValidRef(ref);
    const sent = await sendEvent(this.#deps, ref, String(topic), payload, options);
    if (sent.woke) this.#wake(ref);
    return { delivered: sent.delivered, seq: sent.seq };
  }

  /**
   * Cancels a run that is in progress, waiting or failed — and the child runs
   * it waits on — as an audited action. Returns false if it had already ended.
   */
  async cancel(ref: KeyRef, reason = 'cancelled', by: ActionBy = { actor: 'app', source: 'api' }): Promise<boolean> {
    assertValidRef(ref);
    const cancelled = await cancelRunAction(this.sql, this.clock, ref, { reason, retentionMs: this.retentionMs, by });
    for (const key of cancelled.keys) this.#states.get(idOf({ scope: ref.scope, key }))?.stop('lease_lost');
    if (cancelled.parentRun) this.#wake({ scope: ref.scope, key: cancelled.parentRun });
    return cancelled.applied;
  }

  /**
   * Resolves a run that needs review — an at-most-once call whose outcome is
   * unknown: `{ step, output }` records the operator's output (checked against
   * the step's schema), `{ step, retry: true }` calls again. It changes state
   * only: the run is made due, and a sweeper continues it (this process at
   * once, if it runs the run's version). An audited action, like cancel.
   */
  async resolve(ref: KeyRef, resolution: Resolution, by: ActionBy = { actor: 'app', source: 'api' }): Promise<Resolved> {
    assertValidRef(ref);
    const resolved = await this.#db('resolving a run', () => resolveRunAction(this.sql, this.clock, this.registry, ref, resolution, by));
    this.#wake(ref);
    return resolved;
  }

  /**
   * Reruns a run from a step: a new run under `key` (same scope), linked to
   * the old one, that takes the steps recorded before `from` from the old
   * run's record and executes the rest here, with the old run's version and
   * input. Refused when a step it would execute again had a confirmed
   * outside effect (a completed call, an enqueued message) unless `force`.
   * An audited action, like cancel (recorded on the old run).
   */
  async rerun<W extends Workflow>(
    ref: RunRef<W>,
    options: RerunOptions,
    by: ActionBy = { actor: 'app', source: 'api' },
  ): Promise<RunHandle<WorkflowResult<W>, W>> {
    assertValidRef(ref);
    const started = await this.#db('rerunning a run', () =>
      rerunAction(this.sql, this.clock, ref, options, { leaseMs: this.leaseMs, dueNow: false, registry: this.registry }, by),
    );
    const lease = started.lease;
    if (lease) this.#track(lease, () => this.#resumeOwned(lease)).catch(() => {});
    const fingerprints = { fingerprint: started.plan.fingerprint, legacyFingerprint: () => started.plan.fingerprint };
    const workflow = (ref.workflow ?? this.registry.get(started.plan.workflow, started.plan.version)) as W;
    return {
      workflow,
      scope: started.ref.scope,
      key: started.ref.key,
      rootKey: started.rootKey,
      started: lease !== undefined,
      result: () => this.#result(started.ref, fingerprints) as Promise<WorkflowResult<W>>,
    };
  }

  /** The run's status, output or error, and each step's status and attempts. */
  async get(ref: KeyRef): Promise<RunInfo | undefined> {
    assertValidRef(ref);
    return this.#db('reading a run', () => readRunInfo(this.sql, ref));
  }

  /**
   * One sweep: takes over runs whose lease expired and parked runs that are
   * due, and resumes them, as many as this process has room for. Returns how
   * many. A sweep that filled every free slot sweeps again as soon as one
   * of its runs ends, so a backlog of due runs drains at the pace the
   * process can execute them, not a batch per interval.
   */
  async sweep(): Promise<number> {
    if (this.#closing || this.#sweeping) return 0;
    const capacity = this.maxConcurrentRuns - this.#running.size - this.#waking;
    if (capacity <= 0) return 0;
    this.#sweeping = true;
    try {
      const taken = await this.#db('sweeping expired and due runs', () =>
        sweepExpiredRuns(this.sql, this.clock, capacity, this.leaseMs, this.#versions()),
      );
      this.#backlog = taken.length >= capacity;
      instrument.sweptRuns(taken.length);
      for (const run of taken) {
        const lease = { scope: run.scope, key: run.key, token: run.token };
        this.#deps.log.info(
          { event: run.woken ? 'run.woken' : 'run.takeover', scope: run.scope, run: run.key, executions: run.attempts },
          run.woken ? `run '${run.key}' is due; continuing it` : `took over run '${run.key}': its lease expired (its process died or stalled)`,
        );
        this.#track(lease, () => this.#resumeOwned(lease))
          .catch((error: unknown) => this.#onError(error, `resuming run '${run.key}'`))
          .finally(() => {
            // A run taken over that held a slot gave it back at its end: its queue is dispatched,
            // waiting for the queue's lock (a dispatch running now may have counted the slot as held).
            this.#dispatcher.dispatchAfterEnd(run.queue ?? undefined);
            if (this.#backlog && this.#sweeper) void this.sweep().catch((error: unknown) => this.#onError(error, 'sweeping'));
          });
      }
      return taken.length + (await this.#dispatcher.sweep(capacity - taken.length));
    } finally {
      this.#sweeping = false;
    }
  }

  /** Sweeps every `sweepIntervalMs` until stopped; keeps the process alive meanwhile. */
  startSweeper(): void {
    if (this.#sweeper || this.#closing) return;
    this.#sweeper = setInterval(() => {
      this.sweep().catch((error: unknown) => this.#onError(error, 'sweeping'));
    }, this.sweepIntervalMs);
  }

  stopSweeper(): void {
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }

  /**
   * Graceful stop: takes no new runs; each run in flight finishes its current
   * step, then stops and gives its lease up at once, so another process
   * resumes it without waiting for the lease to expire.
   */
  async shutdown(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#closing = true;
    this.stopSweeper();
    this.#wakeTimers.clear();
    for (const state of this.#states.values()) state.stop('shutting_down');
    const all = Promise.allSettled([...this.#running.values()]);
    const timeout = new Promise((resolve) => setTimeout(resolve, options.timeoutMs ?? 10_000).unref());
    await Promise.race([all, timeout]);
    clearInterval(this.#heartbeat);
  }

  /** shutdown(), then closes the pool if the engine opened it. */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    await this.shutdown(options);
    await this.#ownedDatabase?.close();
  }

  // ---- internals -----------------------------------------------------------------------------

  /**
   * Claims the run. `fold`: the claim stays uncommitted in a transaction that
   * the run's first write commits (one commit fewer per run; a duplicate meets
   * the claim's advisory lock and is told "in progress" meanwhile). Without
   * `fold` (start()), the claim commits before this resolves.
   */
  async #begin(
    workflow: Workflow,
    ref: KeyRef,
    input: unknown,
    options: RunOptions,
    fold: boolean,
  ): Promise<
    | { kind: 'executing'; done: Promise<Settled>; resumed: boolean; fingerprints: Fingerprints; rootKey: string | null }
    | { kind: 'settled'; settled: Settled; fingerprints: Fingerprints; rootKey: string | null }
    | { kind: 'in_progress'; retryAfterMs: number; fingerprints: Fingerprints; rootKey: string | null }
    | { kind: 'mismatch'; existing: { kind: LedgerKind; name: string | null } }
  > {
    if (this.#closing) throw new StepkeyError('shutting_down', 'The engine is shutting down and starts no new runs.');
    assertValidRef(ref);
    const definition = this.registry.require(workflow);
    const parsed = definition.input.safeParse(input);
    if (!parsed.success) {
      throw new StepkeyError(
        'invalid_input',
        `The input of workflow '${definition.name}' is invalid: ${summarise(parsed.error)}.`,
        { cause: parsed.error },
      );
    }
    const inputText = toJsonText(parsed.data, `input of workflow '${definition.name}'`);
    const fingerprints = this.#fingerprints(definition.name, input, parsed.data, options);
    const root = newRootKey(ref.scope, ref.key);
    const action = `starting workflow '${definition.name}'`;
    const request: ClaimRequest = {
      ...ref,
      ...fingerprints,
      kind: 'run',
      name: definition.name,
      // A run that takes no limit and is not enqueued never holds a slot: its end skips the flow triggers.
      run: { version: definition.version, input: inputText, traceContext: activeTraceContext(), flow: takesLimits(definition) },
      rootKey: root,
    };
    // Folded, the claim stays uncommitted in the run's first transaction. A key whose committed row
    // answers the call (a replay, a mismatch, a run in progress or parked) is answered first, by one
    // statement outside any transaction; a vacant one is claimed in the transaction.
    const known = fold ? await this.#db(action, () => probeKey(this.sql, this.clock, request)) : undefined;
    const opening = fold && !known ? await this.#db(action, () => Transaction.begin(this.sql)) : undefined;
    let claim;
    try {
      claim =
        known ??
        (opening
          ? await claimVacantRun(opening.sql, this.clock, request, { leaseMs: this.leaseMs })
          : await claimRun(this.sql, this.clock, request, { leaseMs: this.leaseMs }));
    } catch (error) {
      opening?.abandon();
      throw translateDatabaseError(error, action);
    }
    if (claim.state === 'owned' && !claim.resumed) {
      instrument.runStarted(definition);
      const lease = claim.lease;
      const done = this.#track(lease, () =>
        this.#execute(lease, definition, parsed.data, { rootKey: root, finished: new Map(), opening, storesTrace: request.run?.traceContext === null }),
      );
      return { kind: 'executing', done, resumed: false, fingerprints, rootKey: root };
    }
    if (claim.state === 'owned') {
      if (opening) await this.#db(action, () => opening.commit());
      const lease = claim.lease;
      const done = this.#track(lease, () => this.#resumeOwned(lease));
      return { kind: 'executing', done, resumed: true, fingerprints, rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey) };
    }
    if (claim.state === 'waiting' && claim.resumed) {
      // A failed run on a queue, resumed by this claim and parked for a slot (src/flow).
      if (opening) await this.#db(action, () => opening.commit());
      this.#dispatcher.afterRequeue(claim);
    } else opening?.abandon();
    switch (claim.state) {
      case 'replay':
        return {
          kind: 'settled',
          settled: settledFromRow(replayFields(definition.name, claim.outcome, claim.version)),
          fingerprints,
          rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey),
        };
      case 'in_progress':
        return {
          kind: 'in_progress',
          retryAfterMs: claim.retryAfterMs,
          fingerprints,
          // Unknown while another call's start of the run has not committed.
          rootKey: claim.version === undefined ? null : storedRootKey(ref.scope, ref.key, claim.rootKey),
        };
      case 'waiting':
        return {
          kind: 'settled',
          settled: { state: 'waiting', wait: parkedWait(claim.wait) },
          fingerprints,
          rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey),
        };
      case 'mismatch':
        return { kind: 'mismatch', existing: claim.existing };
    }
  }

  /**
   * The run's fingerprint (v2: the workflow's name and the input as given)
   * and, lazily, its v1 form over the validated input — or the caller's own.
   */
  #fingerprints(name: string, raw: unknown, validated: unknown, options: RunOptions): Fingerprints {
    if (options.fingerprint !== undefined) {
      return { fingerprint: options.fingerprint, legacyFingerprint: options.legacyFingerprint ?? (() => options.fingerprint!) };
    }
    const exclude = options.exclude ? { exclude: options.exclude } : {};
    try {
      return {
        fingerprint: purposeFingerprint(name, raw, exclude),
        legacyFingerprint: () => legacyPurposeFingerprint(name, validated, exclude),
      };
    } catch (error) {
      throw new StepkeyError('invalid_input', `The input of workflow '${name}' cannot be fingerprinted: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  #versions(): { name: string; version: number }[] {
    return this.registry.all().map(({ name, version }) => ({ name, version }));
  }

  /** Registers an execution so that local callers can wait for it. */
  #track(lease: Lease, execute: () => Promise<Settled>): Promise<Settled> {
    const id = idOf(lease);
    // Continued here before its time came (an event, a sweep): its wake would only find it taken.
    this.#wakeTimers.disarm(lease);
    const done = execute().finally(() => {
      if (this.#running.get(id) === done) this.#running.delete(id);
      // Woken while this execution was still unwinding from its park: wake it now.
      if (this.#pendingWakes.delete(id)) this.#wake(lease);
    });
    this.#running.set(id, done);
    return done;
  }

  /** Loads a run this process just took over and executes it under its own version. */
  async #resumeOwned(lease: Lease): Promise<Settled> {
    const loaded = await this.#db('loading a run', () => loadRun(this.sql, this.clock, lease));
    if (!loaded) {
      throw new StepkeyError('run_not_found', `Run '${lease.key}' in scope '${lease.scope}' has no metadata.`);
    }
    const definition = this.registry.get(loaded.workflow, loaded.version);
    if (!definition) {
      const known = this.registry.versions(loaded.workflow);
      return this.#failOwned(
        lease,
        loaded.parentRun,
        new StepkeyError(
          'version_not_found',
          `Run '${lease.key}' was started by workflow '${loaded.workflow}' version ${loaded.version}, ` +
            `which this process does not register (registered: ${known.length ? known.join(', ') : 'none'}). ` +
            'Keep old versions registered until their runs end.',
        ),
      );
    }
    this.#deps.log.info(
      { event: 'run.resumed', scope: lease.scope, run: lease.key, workflow: loaded.workflow, version: loaded.version, finishedSteps: loaded.steps.size },
      `resuming run '${lease.key}' (${loaded.workflow} v${loaded.version}) after ${loaded.steps.size} finished steps`,
    );
    const parsed = definition.input.safeParse(JSON.parse(loaded.input));
    if (!parsed.success) {
      return this.#failOwned(
        lease,
        loaded.parentRun,
        new StepkeyError('invalid_input', `The stored input of run '${lease.key}' no longer parses: ${summarise(parsed.error)}.`),
      );
    }
    return this.#execute(lease, definition, parsed.data, {
      rootKey: storedRootKey(lease.scope, lease.key, loaded.rootKey),
      finished: loaded.steps,
      attempts: loaded.stepAttempts,
      wait: loaded.wait,
      loadedAtMs: loaded.loadedAtMs,
      parentRun: loaded.parentRun,
      trace: loaded.trace,
    });
  }

  /** Executes a child run its parent's step has just claimed (see waits/children.ts). */
  #executeChild(child: ChildStart): void {
    if (this.#closing) {
      // The child is committed with a lease this process will not renew: a sweeper takes it.
      return;
    }
    this.#track(child.lease, () =>
      this.#execute(child.lease, child.workflow, child.input, {
        rootKey: child.rootKey,
        finished: new Map(),
        parentRun: child.parentRun,
      }),
    ).catch((error: unknown) => this.#onError(error, `executing child run '${child.lease.key}'`));
  }

  /**
   * A prompt wake: takes the parked run now if it is due and this process
   * runs its version, and continues it here. Otherwise the next sweep does.
   */
  #wake(ref: KeyRef, missed?: (ref: KeyRef) => Promise<void>): void {
    if (this.#closing || this.#running.size + this.#waking >= this.maxConcurrentRuns) return;
    if (this.#running.has(idOf(ref))) {
      this.#pendingWakes.add(idOf(ref));
      return;
    }
    this.#waking += 1;
    void (async () => {
      let taken;
      try {
        taken = await wakeDueRun(this.sql, this.clock, ref, this.leaseMs, this.#versions());
      } finally {
        this.#waking -= 1;
      }
      if (!taken) return missed?.(ref);
      const lease = { scope: taken.scope, key: taken.key, token: taken.token };
      await this.#track(lease, () => this.#resumeOwned(lease));
    })().catch((error: unknown) => this.#onError(translateDatabaseError(error, 'waking a run'), `waking run '${ref.key}'`));
  }

  /** A timer's wake took nothing: the run not due yet by the database's clock, or due on a queue (waits/wake-timers.ts). */
  async #afterTimerMiss(ref: KeyRef): Promise<void> {
    if (this.#closing) return;
    const parked = await stillParked(this.sql, this.clock, ref);
    if (!parked) return;
    if (parked.queue !== null) this.#dispatcher.dispatchQueue(parked.queue);
    else if (parked.due_in_ms !== null && parked.due_in_ms > 0) this.#wakeTimers.armIn(ref, parked.due_in_ms);
  }

  /** A duplicate found the run parked and due (its sweeper has not come yet): wake it here. */
  #wakeIfDue(ref: KeyRef, wait: RunWaitView): void {
    if (wait.until && wait.until.getTime() <= Date.now() + this.clock.offsetMs) this.#wake(ref);
  }

  /** Fails a run this process took but cannot execute; a child's parent waiting on it is woken, as by any child's end. */
  async #failOwned(lease: Lease, parentRun: string | null, error: StepkeyError): Promise<Settled> {
    const stored = serializeError(error);
    await this.#db('failing a run', async () => {
      const failing = await Transaction.begin(this.sql, { acquireTimeoutMs: this.leaseMs });
      await failing.commit(
        failStatement(failing.sql, this.clock, lease, toJsonText(stored, 'error'), this.retentionMs),
        ...wakeParentStatements(failing.sql, this.clock, lease, parentRun),
      );
    });
    if (parentRun) this.#wake({ scope: lease.scope, key: parentRun });
    return { state: 'failed', error: stored };
  }

  async #execute(lease: Lease, workflow: Workflow, input: unknown, options: RunStateOptions): Promise<Settled> {
    const id = idOf(lease);
    const root = options.rootKey;
    let state = new RunState(this.#deps, lease, options);
    try {
      this.#states.set(id, state);
      let settled = await executeRun(state, workflow, input, this.#extensions);
      // Another holder committed a step first, or a commit's connection went: start again from
      // what the ledger holds.
      for (let restart = 0; settled.state === 'stopped' && settled.reason === 'conflict' && restart < 3; restart += 1) {
        const loaded = await this.#reload(lease);
        // No row: the run's start rode in the transaction whose connection went. Nothing of it
        // exists, and the caller's retry starts it afresh.
        if (loaded === 'unavailable' || loaded === undefined) {
          settled = { state: 'stopped', reason: loaded ? 'unavailable' : 'start_lost' };
          break;
        }
        state = new RunState(this.#deps, lease, {
          rootKey: root,
          finished: loaded.steps,
          attempts: loaded.stepAttempts,
          wait: loaded.wait,
          loadedAtMs: loaded.loadedAtMs,
          parentRun: loaded.parentRun,
          trace: loaded.trace,
        });
        this.#states.set(id, state);
        settled = await executeRun(state, workflow, input, this.#extensions);
      }
      instrument.runEnded(workflow, settled.state);
      if (settled.state === 'stopped') return await this.#afterStop(lease, settled.reason);
      if (settled.state === 'waiting' && !this.#closing) this.#wakeTimers.arm(lease, settled.wait);
      return settled;
    } finally {
      if (this.#states.get(id) === state) this.#states.delete(id);
    }
  }

  /**
   * Loads a run again after its execution stopped on a conflict. A database
   * that is down is waited for, for up to a lease; past it the run is left
   * to whichever sweeper runs once it is back.
   */
  async #reload(lease: Lease): Promise<Awaited<ReturnType<typeof loadRun>> | 'unavailable'> {
    const deadline = Date.now() + this.leaseMs;
    for (let delay = 100; ; delay = Math.min(delay * 2, 1_000)) {
      try {
        return await this.#db('reloading a run', () => loadRun(this.sql, this.clock, lease));
      } catch (error) {
        if (!isUnavailable(error)) throw error;
        if (Date.now() + delay > deadline || this.#closing) return 'unavailable';
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  async #afterStop(lease: Lease, reason: StopReason): Promise<Settled> {
    if (reason === 'start_lost') return { state: 'stopped', reason };
    if (reason === 'shutting_down' || reason === 'conflict' || reason === 'unavailable') {
      await expireRunLease(this.sql, this.clock, lease).catch((error: unknown) =>
        this.#onError(error, `releasing the lease of run '${lease.key}'`),
      );
      return { state: 'stopped', reason };
    }
    const row = await this.#db('reading a run', () => readRow(this.sql, lease));
    if (row && (row.status === 'completed' || row.status === 'cancelled')) return settledFromRow(row);
    return { state: 'stopped', reason };
  }

  async #beat(): Promise<void> {
    // A run whose start has not committed yet has no row to extend. An execution that made no
    // progress for a lease (waiting on a connection that never comes, say) is let go: its lease
    // runs out and another process takes the run over.
    const now = Date.now();
    const states: RunState[] = [];
    for (const state of this.#states.values()) {
      if (state.startPending) continue;
      if (state.stalled(now)) state.stop('lease_lost');
      else states.push(state);
    }
    if (states.length === 0) return;
    const sentAt = Date.now();
    try {
      const held = await heartbeatRuns(this.sql, this.clock, states.map((state) => state.lease), this.leaseMs);
      const alive = new Set(held.map(idOf));
      for (const state of states) {
        if (!alive.has(idOf(state.lease))) state.stop('lease_lost');
        else state.heldUntil = sentAt + this.leaseMs;
      }
    } catch (error) {
      this.#onError(translateDatabaseError(error, 'extending run leases'), 'heartbeat');
      // A lease that cannot be renewed runs out: an execution whose lease would end before the next
      // beat stops now — its calls aborted — so that no call of it is still in flight once another
      // process may take the run over (and reconcile what it did).
      for (const state of states) if (Date.now() + this.#heartbeatMs + this.leaseMs / 10 >= state.heldUntil) state.stop('lease_lost');
    }
  }

  /**
   * Waits until a run settles: here, or elsewhere. A run whose process died
   * (its lease ran out) is taken over and resumed by the waiter itself.
   */
  async #waitFor(ref: KeyRef, fingerprints: Fingerprints): Promise<Settled> {
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      const local = this.#running.get(idOf(ref));
      if (local) {
        const settled = await local;
        if (settled.state !== 'stopped' || settled.reason === 'shutting_down') return settled;
        continue;
      }
      const row = await this.#db('reading a run', () => readRow(this.sql, ref));
      if (!row) throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
      if (row.fingerprint !== fingerprints.fingerprint && row.fingerprint !== fingerprints.legacyFingerprint()) {
        throw mismatchError(ref, { kind: row.kind, name: row.name });
      }
      if (row.status === 'waiting') {
        // Parked: it holds no lease to take over; it continues when due, here if this process runs
        // its version, or wherever a sweeper runs.
        if (row.wakeAt !== null && row.wakeAt <= Date.now() + this.clock.offsetMs) this.#wake(ref);
        await new Promise((resolve) => setTimeout(resolve, delay));
        continue;
      }
      if (row.status !== 'in_progress') return settledFromRow(row);
      const leaseLeftMs = (row.lockedUntil ?? 0) - (Date.now() + this.clock.offsetMs);
      if (leaseLeftMs <= 0 && !this.#closing) {
        const claim = await this.#db('resuming a run', () =>
          claimRun(this.sql, this.clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: this.leaseMs, mode: 'lock' }),
        );
        if (claim.state === 'owned') return this.#track(claim.lease, () => this.#resumeOwned(claim.lease));
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(20, Math.min(delay, leaseLeftMs > 0 ? leaseLeftMs + 20 : delay))));
    }
  }

  async #result(ref: KeyRef, fingerprints: Fingerprints): Promise<unknown> {
    return unwrap(this.registry, ref, await this.#waitFor(ref, fingerprints));
  }

  async #db<T>(action: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      throw translateDatabaseError(error, action);
    }
  }
}

export function createEngine(options: EngineOptions): Engine {
  return new Engine(options);
}

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new StepkeyError('invalid_options', `${name} must be a positive number, got ${value}.`);
  }
  return value;
}

/** The root of a run an enqueue found already there (null while another call's claim of it is uncommitted). */
function queuedRootKey(ref: KeyRef, claim: Exclude<ClaimResult, { state: 'mismatch' }>): string | null {
  if (claim.state === 'owned') return storedRootKey(ref.scope, ref.key, claim.rootKey);
  if (claim.state === 'in_progress' && claim.version === undefined) return null;
  return storedRootKey(ref.scope, ref.key, claim.rootKey);
}

function assertValidRef(ref: KeyRef): void {
  if (!ref || typeof ref !== 'object') throw new StepkeyError('invalid_key', 'A run needs { scope, key }.');
  assertValidScope(ref.scope);
  assertValidKey(ref.key);
}
