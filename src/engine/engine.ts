/**
 * The engine: the public face of stepkey's runs, over modules with one job
 * each — claiming a run (claiming.ts), the runs this process executes and
 * their heartbeat (local-runs.ts, heartbeat.ts), waking (waking.ts),
 * sweeping (sweeping.ts) and awaiting a run that executes elsewhere
 * (awaiting.ts). A run's life — its states and every transition — is
 * src/lifecycle's; queues and limits are src/flow's, effects src/outbox's.
 *
 *   start    claim the run (committed) and execute it in the background
 *   attempt  claim and execute now; a duplicate gets the stored outcome,
 *            "running", "needs_review" or "mismatch" instead of an exception
 *   run      attempt, waiting for a run that executes elsewhere
 *   enqueue  put the run on a queue (src/flow)
 *   resume   continue a failed run, or one whose process died
 *   send     an event to a run; cancel, resolve, rerun: audited actions
 */
import { connect, type Database, type Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { shuttingDownError, StepkeyError } from '../errors/stepkey-error.js';
import { readRow } from '../ledger/sql/read.js';
import type { KeyRef } from '../ledger/types.js';
import { claimRun } from '../lifecycle/claim.js';
import { cancelRunAction } from '../actions/cancel-run.js';
import { rerunAction } from '../actions/rerun-run.js';
import { resolveRunAction } from '../actions/resolve-run.js';
import type { ActionBy } from '../actions/sql/audit.js';
import type { Queue } from '../flow/define-queue.js';
import type { EnqueueOptions } from '../flow/enqueue.js';
import { queuedRun } from '../flow/queued-run.js';
import type { RunInfo } from '../read/run-info.js';
import type { EventInput, EventName, Workflow, WorkflowResult } from '../workflow/define.js';
import type { Resolution, Resolved } from '../workflow/effects/resolve.js';
import type { RunRef } from '../workflow/handles.js';
import { mismatchError, parkedWait, replayFields, settledFromRow, toAttempt, unwrap, type RunAttempt } from '../workflow/outcomes.js';
import type { WorkflowRegistry } from '../workflow/registry.js';
import type { RerunOptions } from '../workflow/rerun/rerun.js';
import type { Sent } from '../workflow/waits/send.js';
import { runHandle, runResult } from './awaiting.js';
import { beginRun, fingerprintsOf, foundRootKey } from './claiming.js';
import { buildCore, inDatabase, type EngineCore } from './core.js';
import { Heartbeat } from './heartbeat.js';
import { assertValidRef, ownedPoolOptions, type EngineOptions, type InputOf, type RunHandle, type RunOptions } from './options.js';
import { Sweeper } from './sweeping.js';
import { readRun, type RegisteredOf, type RunOutput, type TypedRunInfo } from './typed-doors.js';
import { sendTo } from './typed-send.js';

export type { EngineOptions, RunHandle, RunOptions } from './options.js';
export type { RunAttempt } from '../workflow/outcomes.js';
export type { RunOutput, TypedRunInfo, VersionsOf } from './typed-doors.js';

const byApp: ActionBy = { actor: 'app', source: 'api' };

/**
 * `Registered`: the workflow versions the engine was created with (by type),
 * which `get(workflow, ref)` types a run's output by.
 */
export class Engine<Registered extends Workflow = Workflow> {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly registry: WorkflowRegistry;
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly sweepIntervalMs: number;
  readonly maxConcurrentRuns: number;
  readonly #core: EngineCore & { closing: boolean };
  readonly #ownedDatabase: Database | undefined;
  readonly #heartbeat: Heartbeat;
  readonly #sweeper: Sweeper;

  constructor(options: EngineOptions & { workflows: readonly Registered[] }) {
    const database = typeof options.database === 'string' ? connect(options.database, ownedPoolOptions(options)) : options.database;
    this.#ownedDatabase = typeof options.database === 'string' ? database : undefined;
    this.#core = buildCore(database.sql, options);
    ({ sql: this.sql, clock: this.clock, registry: this.registry } = this.#core);
    ({ leaseMs: this.leaseMs, retentionMs: this.retentionMs, sweepIntervalMs: this.sweepIntervalMs, maxConcurrentRuns: this.maxConcurrentRuns } =
      this.#core.settings);
    this.#heartbeat = new Heartbeat(this.#core);
    this.#sweeper = new Sweeper(this.#core);
  }

  /** The queue registered as `queue` (an object made by defineQueue, or a name); throws `invalid_options` naming the registered queues otherwise. */
  requireQueue(queue: Queue | string): Queue {
    return this.#core.flow.require(queue);
  }

  /** Runs executing in this process right now. */
  get activeRuns(): number {
    return this.#core.runs.size;
  }

  /** Claims the run and executes it in the background; resolves once the run's row has committed. */
  async start<W extends Workflow>(workflow: W, ref: KeyRef, input: InputOf<W>, options: RunOptions = {}): Promise<RunHandle<WorkflowResult<W>, W>> {
    const begun = await beginRun(this.#core, workflow, ref, input, options, false);
    if (begun.kind === 'mismatch') throw mismatchError(ref, begun.existing);
    if (begun.kind === 'executing') begun.done.catch(() => {});
    return runHandle(this.#core, workflow, ref, begun.rootKey, begun.kind === 'executing' && !begun.resumed, begun.fingerprints);
  }

  /** Claims the run and executes it now; duplicates get the stored outcome, running, needs_review or mismatch. */
  async attempt<W extends Workflow>(workflow: W, ref: KeyRef, input: InputOf<W>, options: RunOptions = {}): Promise<RunAttempt<WorkflowResult<W>>> {
    const begun = await beginRun(this.#core, workflow, ref, input, options, true);
    switch (begun.kind) {
      case 'mismatch':
        return { state: 'mismatch', existing: begun.existing };
      case 'running':
        return { state: 'running', retryAfterMs: begun.retryAfterMs };
      case 'settled':
        if (begun.settled.state === 'waiting') this.#core.waker.wakeIfDue(ref, begun.settled.wait);
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
  async run<W extends Workflow>(workflow: W, ref: KeyRef, input: InputOf<W>, options: RunOptions = {}): Promise<WorkflowResult<W>> {
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      const begun = await beginRun(this.#core, workflow, ref, input, options, true);
      if (begun.kind === 'mismatch') throw mismatchError(ref, begun.existing);
      if (begun.kind === 'settled' && begun.settled.state !== 'waiting') return unwrap(this.registry, ref, begun.settled) as WorkflowResult<W>;
      if (begun.kind === 'executing') {
        const settled = await begun.done;
        if (settled.state === 'waiting') return runResult(this.#core, ref, begun.fingerprints) as Promise<WorkflowResult<W>>;
        if (settled.state !== 'stopped' || settled.reason === 'shutting_down' || settled.reason === 'unavailable') {
          return unwrap(this.registry, ref, settled) as WorkflowResult<W>;
        }
        continue; // another process has it now
      }
      if (begun.kind === 'settled') return runResult(this.#core, ref, begun.fingerprints) as Promise<WorkflowResult<W>>;
      const local = this.#core.runs.running(ref);
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
  async enqueue<W extends Workflow>(workflow: W, ref: KeyRef, input: InputOf<W>, options: EnqueueOptions & RunOptions):
    Promise<RunHandle<WorkflowResult<W>, W> & { queued: boolean; requeued: boolean }> {
    if (this.#core.closing) throw shuttingDownError();
    assertValidRef(ref);
    const definition = this.registry.require(workflow);
    const run = queuedRun(this.#core.flow, definition, ref, input, options);
    // `exclude` names fields of the input: the fingerprint covers the input within { input, queue, priority }.
    const fingerprints = fingerprintsOf(definition.name, run.fingerprinted, run.validatedFingerprinted, { ...options, exclude: run.exclude });
    const { claim, own, rootKey: root, queued, requeued } = await this.#core.runs.taking(async () => {
      const enqueued = await this.#core.dispatcher.enqueue(definition, ref, run, fingerprints);
      // A run this enqueue took over (its process died): executed here, as any claim's takeover is.
      if (enqueued.claim.state === 'owned' && enqueued.claim.resumed) this.#core.runs.resumeClaimed(enqueued.claim).catch(() => {});
      return enqueued;
    });
    if (claim.state === 'mismatch') throw mismatchError(ref, claim.existing, 'input, queue or priority');
    return { ...runHandle(this.#core, workflow, ref, own ? root : foundRootKey(ref, claim), own, fingerprints), queued, requeued };
  }

  /** Continues a run that failed, or whose process died, from its last finished step. */
  async resume(ref: KeyRef): Promise<RunAttempt<unknown>> {
    if (this.#core.closing) throw shuttingDownError();
    assertValidRef(ref);
    const { sql, clock } = this;
    const row = await inDatabase('reading a run', () => readRow(sql, ref));
    if (!row || row.kind !== 'run') throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
    const { claim, done } = await this.#core.runs.taking(async () => {
      const claim = await inDatabase('resuming a run', () =>
        claimRun(sql, clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: this.leaseMs, mode: 'lock' }),
      );
      return { claim, done: claim.state === 'owned' ? this.#core.runs.resumeClaimed(claim) : undefined };
    });
    switch (claim.state) {
      case 'vacant':
        throw new StepkeyError('run_not_found', `Run '${ref.key}' in scope '${ref.scope}' is gone (expired).`);
      case 'owned':
        return toAttempt(this.registry, await done!, false);
      case 'replay':
        return toAttempt(this.registry, settledFromRow(replayFields(row.name ?? '', claim.outcome, row.version)), true);
      case 'in_progress':
        return { state: 'running', retryAfterMs: claim.retryAfterMs };
      case 'waiting':
        this.#core.dispatcher.afterRequeue(claim);
        return toAttempt(this.registry, { state: 'waiting', wait: parkedWait(claim.wait) }, !claim.resumed);
      case 'mismatch':
        return { state: 'mismatch', existing: claim.existing };
    }
  }

  /**
   * Sends an event to a run: kept in the run's mailbox for `topic` (first in,
   * first out) until a `waitForEvent` of it consumes it, and a run waiting
   * for it is woken — here at once when this process runs its version,
   * otherwise by the next sweep. `key` is the sender's idempotency key: the
   * same key again delivers nothing more; with another payload it is a
   * mismatch. The payload is checked against the event's schema, declared on
   * the run's workflow version, before anything is stored. Typed by a
   * workflow, or a ref or handle that carries one: see typed-send.ts.
   */
  send<W extends Workflow, T extends EventName<W>>(workflow: W, ref: KeyRef, topic: T, payload: EventInput<W, T>, options: { key: string }): Promise<Sent>;
  send<W extends Workflow, T extends EventName<W>>(ref: RunRef<W>, topic: T, payload: EventInput<W, T>, options: { key: string }): Promise<Sent>;
  send(...args: unknown[]): Promise<Sent> {
    return sendTo(this.#core, args);
  }

  /**
   * Cancels a run that is in progress, waiting or failed — and every
   * descendant run — as an audited action; each stops at its next step
   * boundary, or at once if parked. Returns false if it had already ended.
   */
  async cancel(ref: KeyRef, reason = 'cancelled', by: ActionBy = byApp): Promise<boolean> {
    assertValidRef(ref);
    const cancelled = await cancelRunAction(this.sql, this.clock, ref, { reason, retentionMs: this.retentionMs, by });
    this.#core.runs.stop(ref.scope, cancelled.keys, 'lease_lost');
    if (cancelled.parentRun) this.#core.waker.wake({ scope: ref.scope, key: cancelled.parentRun });
    return cancelled.applied;
  }

  /**
   * Resolves a run that needs review — an at-most-once call whose outcome is
   * unknown: `{ step, output }` records the operator's output (checked against
   * the step's schema), `{ step, retry: true }` calls again. The run is made
   * due, and a sweeper continues it (this process at once, if it runs its
   * version). An audited action, like cancel.
   */
  async resolve(ref: KeyRef, resolution: Resolution, by: ActionBy = byApp): Promise<Resolved> {
    assertValidRef(ref);
    const resolved = await inDatabase('resolving a run', () => resolveRunAction(this.sql, this.clock, this.registry, ref, resolution, by));
    this.#core.waker.wake(ref);
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
  async rerun<W extends Workflow>(ref: RunRef<W>, options: RerunOptions, by: ActionBy = byApp): Promise<RunHandle<WorkflowResult<W>, W>> {
    if (this.#core.closing) throw shuttingDownError();
    assertValidRef(ref);
    const started = await this.#core.runs.taking(async () => {
      const started = await inDatabase('rerunning a run', () =>
        rerunAction(this.sql, this.clock, ref, options, { leaseMs: this.leaseMs, dueNow: false, registry: this.registry }, by),
      );
      // Started here, or taken over here (the same rerun asked for again, its process gone): executed here.
      const lease = started.lease ?? started.takenOver;
      // Shutting down meanwhile: its lease is given up at once, for another process (trackTaken).
      if (lease) this.#core.runs.trackTaken(lease, () => this.#core.runs.resumeOwned(lease)).catch(() => {});
      return started;
    });
    const fingerprints = { fingerprint: started.plan.fingerprint, legacyFingerprint: () => started.plan.fingerprint };
    const workflow = (ref.workflow ?? this.registry.get(started.plan.workflow, started.plan.version)) as W;
    return runHandle(this.#core, workflow, started.ref, started.rootKey, started.lease !== undefined, fingerprints);
  }

  /**
   * The run's status, output or error, and each step's status and attempts
   * (the output as stored: JSON text); undefined for no run. With its
   * workflow — `get(approval, ref)` — the output is parsed and typed: see
   * typed-doors.ts.
   */
  get(ref: KeyRef): Promise<RunInfo | undefined>;
  get<W extends Registered>(workflow: W, ref: KeyRef): Promise<TypedRunInfo<RunOutput<Registered, W>> | undefined>;
  get(first: KeyRef | Workflow, second?: KeyRef): Promise<RunInfo | TypedRunInfo<unknown> | undefined> {
    return readRun(this.#core, first, second);
  }

  /** One sweep (see sweeping.ts); returns how many runs it took, dispatched or ended at their deadline. */
  sweep(): Promise<number> {
    return this.#sweeper.sweep();
  }

  /** Sweeps every `sweepIntervalMs` until stopped; keeps the process alive meanwhile. */
  startSweeper(): void {
    this.#sweeper.start();
  }

  stopSweeper(): void {
    this.#sweeper.stop();
  }

  /**
   * Graceful stop: takes no new runs; each run in flight finishes its current
   * step, then stops and gives its lease up at once, so another process
   * resumes it without waiting for the lease to expire. A call made before
   * whose claim answers after executes nothing here: engine.run's and
   * attempt's claim is undone (shutting_down, nothing written); engine.start's,
   * committed, gives its lease up at once, as do runs a dispatch, a sweep or a
   * wake still in flight takes. Resolves once the executions and those takes
   * have ended, their leases given up, or after `timeoutMs` (default 10 s).
   */
  async shutdown(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#core.closing = true;
    this.stopSweeper();
    this.#core.waker.clear();
    await this.#core.runs.stopAll('shutting_down', options.timeoutMs ?? 10_000);
    this.#heartbeat.stop();
  }

  /** shutdown(), then closes the pool if the engine opened it. */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    await this.shutdown(options);
    await this.#ownedDatabase?.close();
  }
}

/** An engine; its type knows the workflow versions in `workflows` (see Engine.get). */
export function createEngine<const W extends Workflow = Workflow>(options: EngineOptions & { workflows: readonly W[] }): Engine<RegisteredOf<W>> {
  return new Engine<Workflow>(options) as Engine<RegisteredOf<W>>;
}
