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
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { rootKey } from '../keys/derive.js';
import { purposeFingerprint } from '../keys/fingerprint.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import { claimKey } from '../ledger/claim.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import { serializeError, toJsonText, type StoredError } from '../ledger/outcome.js';
import { failStatement } from '../ledger/sql/finish.js';
import { readRow, type LedgerRow } from '../ledger/sql/read.js';
import type { KeyRef, Lease, LedgerKind } from '../ledger/types.js';
import type { Workflow, WorkflowResult } from './define.js';
import { executeRun, type Settled, type StepHandleExtension } from './executor.js';
import { WorkflowRegistry } from './registry.js';
import { readRunInfo, type RunInfo } from './run-info.js';
import { RunState, type RunDeps } from './run-state.js';
import { cancelRun } from './sql/cancel-run.js';
import { loadRun, type FinishedStep } from './sql/load-run.js';
import { expireRunLease, heartbeatRuns, sweepExpiredRuns } from './sql/run-leases.js';
import { decodeValue, summarise } from './values.js';
import { enqueueStep } from '../outbox/enqueue-step.js';

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
  /** Step kinds added by other layers (the outbox's enqueue). */
  stepExtensions?: readonly StepHandleExtension[];
  /** Background failures (heartbeat, sweeper); default: printed to stderr. */
  onError?: (error: unknown, context: string) => void;
}

export interface RunOptions {
  /** Fingerprint to use instead of (workflow name + input): a tRPC procedure passes path + input. */
  fingerprint?: string;
  /** Volatile input fields left out of the fingerprint, e.g. ['meta.traceId']. */
  exclude?: string[];
}

export type RunAttempt<Result> =
  | { state: 'completed'; output: Result; replayed: boolean }
  /** A deterministic error ended the run; it is stored and replayed. */
  | { state: 'errored'; error: StoredError; replayed: boolean }
  | { state: 'cancelled'; reason: StoredError }
  | { state: 'in_progress'; retryAfterMs: number }
  | { state: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

export interface RunHandle<Result> extends KeyRef {
  readonly rootKey: string;
  /** false when the key already had a run (this call joined or replayed it). */
  readonly started: boolean;
  /** The run's result, waiting for it wherever it executes. */
  result(): Promise<Result>;
}

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

const envNumber = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};

const idOf = (ref: KeyRef) => `${ref.scope}\u0000${ref.key}`;

export class Engine {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly registry: WorkflowRegistry;
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly sweepIntervalMs: number;
  readonly maxConcurrentRuns: number;
  readonly #deps: RunDeps;
  readonly #ownedDatabase: Database | undefined;
  readonly #extensions: readonly StepHandleExtension[];
  readonly #onError: (error: unknown, context: string) => void;
  readonly #states = new Map<string, RunState>();
  readonly #running = new Map<string, Promise<Settled>>();
  readonly #heartbeat: NodeJS.Timeout;
  #sweeper: NodeJS.Timeout | undefined;
  #sweeping = false;
  #closing = false;

  constructor(options: EngineOptions) {
    const database = typeof options.database === 'string' ? connect(options.database) : options.database;
    this.#ownedDatabase = typeof options.database === 'string' ? database : undefined;
    this.sql = database.sql;
    this.clock = options.clock ?? systemClock;
    this.registry = new WorkflowRegistry(options.workflows ?? []);
    this.leaseMs = positive('leaseMs', options.leaseMs ?? envNumber('STEPKEY_LEASE_MS'), 8_000);
    this.retentionMs = positive('retentionMs', options.retentionMs, DEFAULT_RETENTION_MS);
    this.sweepIntervalMs = positive('sweepIntervalMs', options.sweepIntervalMs ?? envNumber('STEPKEY_SWEEP_INTERVAL_MS'), 1_000);
    this.maxConcurrentRuns = positive('maxConcurrentRuns', options.maxConcurrentRuns, 8);
    const heartbeatMs = positive('heartbeatMs', options.heartbeatMs, Math.max(50, Math.floor(this.leaseMs / 3)));
    this.#extensions = [enqueueStep, ...(options.stepExtensions ?? [])];
    this.#onError = options.onError ?? ((error, context) => console.error(`stepkey: ${context}:`, error));
    this.#deps = { sql: this.sql, clock: this.clock, retentionMs: this.retentionMs, leaseMs: this.leaseMs };
    this.#heartbeat = setInterval(() => void this.#beat(), heartbeatMs);
    this.#heartbeat.unref();
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
  ): Promise<RunHandle<WorkflowResult<W>>> {
    const begun = await this.#begin(workflow, ref, input, options, false);
    if (begun.kind === 'mismatch') throw mismatchError(ref, begun.existing);
    if (begun.kind === 'executing') begun.done.catch(() => {});
    return {
      scope: ref.scope,
      key: ref.key,
      rootKey: rootKey(ref.scope, ref.key),
      started: begun.kind === 'executing' && !begun.resumed,
      result: () => this.#result(workflow, ref, begun.fingerprint) as Promise<WorkflowResult<W>>,
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
        return this.#toAttempt(workflow, begun.settled, true);
      case 'executing':
        return this.#toAttempt(workflow, await begun.done, false);
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
      if (begun.kind === 'settled') return this.#unwrap(workflow, ref, begun.settled) as WorkflowResult<W>;
      if (begun.kind === 'executing') {
        const settled = await begun.done;
        if (settled.state !== 'stopped' || settled.reason === 'shutting_down') {
          return this.#unwrap(workflow, ref, settled) as WorkflowResult<W>;
        }
        continue; // another process has it now
      }
      const local = this.#running.get(idOf(ref));
      if (local) await local.catch(() => undefined);
      else await new Promise((resolve) => setTimeout(resolve, Math.max(20, Math.min(begun.retryAfterMs, delay))));
    }
  }

  /** Continues a run that failed, or whose process died, from its last finished step. */
  async resume(ref: KeyRef): Promise<RunAttempt<unknown>> {
    assertValidRef(ref);
    const row = await this.#db('reading a run', () => readRow(this.sql, ref));
    if (!row || row.kind !== 'run') throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
    const claim = await this.#db('resuming a run', () =>
      claimKey(this.sql, this.clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: this.leaseMs, mode: 'lock' }),
    );
    if (claim.state === 'vacant') throw new StepkeyError('run_not_found', `Run '${ref.key}' in scope '${ref.scope}' is gone (expired).`);
    if (claim.state === 'owned') {
      const settled = await this.#track(claim.lease, () => this.#resumeOwned(claim.lease));
      return this.#toAttempt(undefined, settled, false);
    }
    if (claim.state === 'replay') return this.#toAttempt(undefined, settledFromRow({ ...row, ...replayFields(claim.outcome) }), true);
    if (claim.state === 'in_progress') return { state: 'in_progress', retryAfterMs: claim.retryAfterMs };
    return { state: 'mismatch', existing: claim.existing };
  }

  /** Cancels a run that is in progress or failed. Returns false if it had already ended. */
  async cancel(ref: KeyRef, reason = 'cancelled'): Promise<boolean> {
    assertValidRef(ref);
    const stored = toJsonText({ name: 'RunCancelled', message: reason } satisfies StoredError, 'reason');
    const cancelled = await this.#db('cancelling a run', () => cancelRun(this.sql, this.clock, ref, stored, this.retentionMs));
    if (cancelled) this.#states.get(idOf(ref))?.stop('lease_lost');
    return cancelled;
  }

  /** The run's status, output or error, and each step's status and attempts. */
  async get(ref: KeyRef): Promise<RunInfo | undefined> {
    assertValidRef(ref);
    return this.#db('reading a run', () => readRunInfo(this.sql, ref));
  }

  /** One sweep: takes over runs whose lease expired and resumes them. Returns how many. */
  async sweep(): Promise<number> {
    if (this.#closing || this.#sweeping) return 0;
    const capacity = this.maxConcurrentRuns - this.#running.size;
    if (capacity <= 0) return 0;
    this.#sweeping = true;
    try {
      const taken = await this.#db('sweeping expired runs', () =>
        sweepExpiredRuns(this.sql, this.clock, capacity, this.leaseMs),
      );
      for (const run of taken) {
        const lease = { scope: run.scope, key: run.key, token: run.token };
        this.#track(lease, () => this.#resumeOwned(lease)).catch((error: unknown) =>
          this.#onError(error, `resuming run '${run.key}'`),
        );
      }
      return taken.length;
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
    | { kind: 'executing'; done: Promise<Settled>; resumed: boolean; fingerprint: string }
    | { kind: 'settled'; settled: Settled; fingerprint: string }
    | { kind: 'in_progress'; retryAfterMs: number; fingerprint: string }
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
    const fingerprint =
      options.fingerprint ?? purposeFingerprint(definition.name, parsed.data, options.exclude ? { exclude: options.exclude } : {});
    const action = `starting workflow '${definition.name}'`;
    const opening = fold ? await this.#db(action, () => Transaction.begin(this.sql)) : undefined;
    let claim;
    try {
      claim = await claimKey(
        opening?.sql ?? this.sql,
        this.clock,
        { ...ref, fingerprint, kind: 'run', name: definition.name, run: { version: definition.version, input: inputText } },
        { leaseMs: this.leaseMs },
      );
    } catch (error) {
      opening?.abandon();
      throw translateDatabaseError(error, action);
    }
    if (claim.state === 'owned' && !claim.resumed) {
      const lease = claim.lease;
      const done = this.#track(lease, () => this.#execute(lease, definition, parsed.data, new Map(), opening));
      return { kind: 'executing', done, resumed: false, fingerprint };
    }
    if (claim.state === 'owned') {
      if (opening) await this.#db(action, () => opening.commit());
      const lease = claim.lease;
      return { kind: 'executing', done: this.#track(lease, () => this.#resumeOwned(lease)), resumed: true, fingerprint };
    }
    opening?.abandon();
    switch (claim.state) {
      case 'replay':
        return { kind: 'settled', settled: settledFromRow(replayFields(claim.outcome)), fingerprint };
      case 'in_progress':
        return { kind: 'in_progress', retryAfterMs: claim.retryAfterMs, fingerprint };
      case 'mismatch':
        return { kind: 'mismatch', existing: claim.existing };
    }
  }

  /** Registers an execution so that local callers can wait for it. */
  #track(lease: Lease, execute: () => Promise<Settled>): Promise<Settled> {
    const id = idOf(lease);
    const done = execute().finally(() => {
      if (this.#running.get(id) === done) this.#running.delete(id);
    });
    this.#running.set(id, done);
    return done;
  }

  /** Loads a run this process just took over and executes it under its own version. */
  async #resumeOwned(lease: Lease): Promise<Settled> {
    const loaded = await this.#db('loading a run', () => loadRun(this.sql, lease));
    if (!loaded) {
      throw new StepkeyError('run_not_found', `Run '${lease.key}' in scope '${lease.scope}' has no metadata.`);
    }
    const definition = this.registry.get(loaded.workflow, loaded.version);
    if (!definition) {
      const known = this.registry.versions(loaded.workflow);
      return this.#failOwned(
        lease,
        new StepkeyError(
          'version_not_found',
          `Run '${lease.key}' was started by workflow '${loaded.workflow}' version ${loaded.version}, ` +
            `which this process does not register (registered: ${known.length ? known.join(', ') : 'none'}). ` +
            'Keep old versions registered until their runs end.',
        ),
      );
    }
    const parsed = definition.input.safeParse(JSON.parse(loaded.input));
    if (!parsed.success) {
      return this.#failOwned(
        lease,
        new StepkeyError('invalid_input', `The stored input of run '${lease.key}' no longer parses: ${summarise(parsed.error)}.`),
      );
    }
    return this.#execute(lease, definition, parsed.data, loaded.steps);
  }

  async #failOwned(lease: Lease, error: StepkeyError): Promise<Settled> {
    const stored = serializeError(error);
    await this.#db('failing a run', () =>
      failStatement(this.sql, this.clock, lease, toJsonText(stored, 'error'), this.retentionMs),
    );
    return { state: 'failed', error: stored };
  }

  async #execute(
    lease: Lease,
    workflow: Workflow,
    input: unknown,
    finished: Map<string, FinishedStep>,
    opening?: Transaction,
  ): Promise<Settled> {
    const id = idOf(lease);
    const root = rootKey(lease.scope, lease.key);
    let state = new RunState(this.#deps, lease, root, finished, opening);
    try {
      this.#states.set(id, state);
      let settled = await executeRun(state, workflow, input, this.#extensions);
      // Another holder committed a step first: start again from what the ledger holds.
      for (let restart = 0; settled.state === 'stopped' && settled.reason === 'conflict' && restart < 3; restart += 1) {
        const loaded = await this.#db('reloading a run', () => loadRun(this.sql, lease));
        state = new RunState(this.#deps, lease, root, loaded?.steps ?? new Map());
        this.#states.set(id, state);
        settled = await executeRun(state, workflow, input, this.#extensions);
      }
      if (settled.state === 'stopped') return await this.#afterStop(lease, settled.reason);
      return settled;
    } finally {
      if (this.#states.get(id) === state) this.#states.delete(id);
    }
  }

  async #afterStop(lease: Lease, reason: 'lease_lost' | 'shutting_down' | 'conflict'): Promise<Settled> {
    if (reason === 'shutting_down' || reason === 'conflict') {
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
    // A run whose start has not committed yet has no row to extend.
    const states = [...this.#states.values()].filter((state) => !state.startPending);
    if (states.length === 0) return;
    try {
      const held = await heartbeatRuns(this.sql, this.clock, states.map((state) => state.lease), this.leaseMs);
      const alive = new Set(held.map(idOf));
      for (const state of states) if (!alive.has(idOf(state.lease))) state.stop('lease_lost');
    } catch (error) {
      this.#onError(translateDatabaseError(error, 'extending run leases'), 'heartbeat');
    }
  }

  /**
   * Waits until a run settles: here, or elsewhere. A run whose process died
   * (its lease ran out) is taken over and resumed by the waiter itself.
   */
  async #waitFor(ref: KeyRef, fingerprint: string): Promise<Settled> {
    for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
      const local = this.#running.get(idOf(ref));
      if (local) {
        const settled = await local;
        if (settled.state !== 'stopped' || settled.reason === 'shutting_down') return settled;
        continue;
      }
      const row = await this.#db('reading a run', () => readRow(this.sql, ref));
      if (!row) throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
      if (row.fingerprint !== fingerprint) throw mismatchError(ref, { kind: row.kind, name: row.name });
      if (row.status !== 'in_progress') return settledFromRow(row);
      const leaseLeftMs = (row.lockedUntil ?? 0) - (Date.now() + this.clock.offsetMs);
      if (leaseLeftMs <= 0 && !this.#closing) {
        const claim = await this.#db('resuming a run', () =>
          claimKey(this.sql, this.clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: this.leaseMs, mode: 'lock' }),
        );
        if (claim.state === 'owned') return this.#track(claim.lease, () => this.#resumeOwned(claim.lease));
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(20, Math.min(delay, leaseLeftMs > 0 ? leaseLeftMs + 20 : delay))));
    }
  }

  async #result(workflow: Workflow, ref: KeyRef, fingerprint: string): Promise<unknown> {
    return this.#unwrap(workflow, ref, await this.#waitFor(ref, fingerprint));
  }

  #toAttempt<R>(workflow: Workflow | undefined, settled: Settled, replayed: boolean): RunAttempt<R> {
    switch (settled.state) {
      case 'completed':
        return { state: 'completed', output: decodeResult(workflow, settled.body) as R, replayed };
      case 'errored':
        return { state: 'errored', error: settled.error, replayed };
      case 'cancelled':
        return { state: 'cancelled', reason: settled.reason };
      case 'failed':
        throw runFailed(settled.error);
      case 'stopped':
        throw stoppedError(settled.reason);
    }
  }

  #unwrap(workflow: Workflow, ref: KeyRef, settled: Settled): unknown {
    switch (settled.state) {
      case 'completed':
        return decodeResult(workflow, settled.body);
      case 'errored':
        throw new StepkeyError('run_failed', settled.error.message, { details: { error: settled.error, ...ref } });
      case 'cancelled':
        throw new StepkeyError('run_cancelled', `Run '${ref.key}' was cancelled: ${settled.reason.message}`, {
          details: { reason: settled.reason },
        });
      case 'failed':
        throw runFailed(settled.error);
      case 'stopped':
        throw stoppedError(settled.reason);
    }
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

function assertValidRef(ref: KeyRef): void {
  if (!ref || typeof ref !== 'object') throw new StepkeyError('invalid_key', 'A run needs { scope, key }.');
  assertValidScope(ref.scope);
  assertValidKey(ref.key);
}

function decodeResult(workflow: Workflow | undefined, body: string): unknown {
  return decodeValue(body, workflow?.output, `The result of workflow '${workflow?.name ?? 'run'}'`);
}

function replayFields(outcome: { status: 'completed' | 'cancelled'; ok: boolean; body: string }) {
  return { status: outcome.status, outcomeOk: outcome.ok, outcome: outcome.body, lastError: null };
}

function settledFromRow(row: Pick<LedgerRow, 'status' | 'outcomeOk' | 'outcome' | 'lastError'>): Settled {
  if (row.status === 'cancelled') return { state: 'cancelled', reason: JSON.parse(row.outcome ?? '{}') };
  if (row.status === 'failed') return { state: 'failed', error: JSON.parse(row.lastError ?? '{}') };
  if (row.status === 'in_progress') return { state: 'stopped', reason: 'lease_lost' };
  return row.outcomeOk
    ? { state: 'completed', body: row.outcome ?? '' }
    : { state: 'errored', error: JSON.parse(row.outcome ?? '{}') };
}

function mismatchError(ref: KeyRef, existing: { kind: LedgerKind; name: string | null }): StepkeyError {
  return new StepkeyError(
    'mismatch',
    `Key '${ref.key}' in scope '${ref.scope}' was first used for ${existing.kind} '${existing.name ?? '?'}' ` +
      'with another input; a key names one operation and cannot be reused with a different payload.',
    { details: { existing } },
  );
}

function runFailed(error: StoredError): StepkeyError {
  return new StepkeyError('run_failed', `${error.message} (the run is resumable: retry with the same key)`, {
    retryable: true,
    details: { error, resumable: true },
  });
}

function stoppedError(reason: string): StepkeyError {
  return reason === 'shutting_down'
    ? new StepkeyError('shutting_down', 'This process is shutting down; the run continues elsewhere.')
    : new StepkeyError('lease_lost', 'Another process took this run over; it continues there.');
}
