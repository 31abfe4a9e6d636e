/**
 * The runs this process executes: each execution is tracked (so that a
 * caller here waits for it, and a wake of a run still unwinding from its park
 * is kept for when it has), executed under its lease — started again from
 * what the ledger holds after a conflict — and, when it stops, settled: its
 * lease given up, or the run ended at its deadline with its descendants, or
 * read back when someone else ended it.
 */
import { Transaction } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { storedRootKey } from '../keys/derive.js';
import { serializeError, toJsonText, type StoredError } from '../ledger/outcome.js';
import { readRow } from '../ledger/sql/read.js';
import type { KeyRef, Lease } from '../ledger/types.js';
import { deadlineExceededOutcome } from '../lifecycle/deadline.js';
import { failRunStatement } from '../lifecycle/fail.js';
import { expireRunLease } from '../lifecycle/leases.js';
import { endTreeIn } from '../lifecycle/tree.js';
import { wakeParentStatements } from '../lifecycle/wake.js';
import { instrument } from '../telemetry/instrumentation.js';
import type { Workflow } from '../workflow/define.js';
import { isUnavailable, type StopReason } from '../workflow/errors.js';
import { executeRun, type Settled } from '../workflow/executor.js';
import { settledFromRow } from '../workflow/outcomes.js';
import { newRunState, type ChildStart, type RunState, type RunStateOptions } from '../workflow/run-state.js';
import { inTransactionRetryingDeadlock } from '../db/retrying-transaction.js';
import { loadRun, loadedFresh, type LoadedRun } from '../workflow/sql/load-run.js';
import type { FreshRun } from '../lifecycle/dispatch.js';
import { summarise } from '../workflow/values.js';
import { inDatabase, type EngineCore } from './core.js';
import { idOf } from './options.js';

export class LocalRuns {
  readonly #core: EngineCore;
  readonly #states = new Map<string, RunState>();
  readonly #running = new Map<string, Promise<Settled>>();
  /** Runs woken while their execution here was still ending (it had just parked). */
  readonly #pendingWakes = new Set<string>();
  /** Work in flight that may take runs for this process (taking): what shutdown waits for besides executions. */
  readonly #takes = new Set<Promise<void>>();

  constructor(core: EngineCore) {
    this.#core = core;
  }

  /** Runs executing in this process right now. */
  get size(): number {
    return this.#running.size;
  }

  /** The execution of `ref` in this process, if any. */
  running(ref: KeyRef): Promise<Settled> | undefined {
    return this.#running.get(idOf(ref));
  }

  /** Keeps a wake of `ref` for when its execution here has ended. */
  wakeAfter(ref: KeyRef): boolean {
    if (!this.#running.has(idOf(ref))) return false;
    this.#pendingWakes.add(idOf(ref));
    return true;
  }

  /** Every execution's state (the heartbeat's list). */
  states(): IterableIterator<RunState> {
    return this.#states.values();
  }

  /** Stops the executions of `keys` (in `scope`) at their next step boundary, their calls aborted. */
  stop(scope: string, keys: readonly string[], reason: StopReason): void {
    for (const key of keys) this.#states.get(idOf({ scope, key }))?.control.stop(reason);
  }

  /**
   * Stops every execution (shutdown), and resolves when they have all ended,
   * and every take in flight with them — its runs given up — or `timeoutMs` passed.
   */
  async stopAll(reason: StopReason, timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    });
    let late = false;
    void timedOut.then(() => (late = true));
    try {
      for (;;) {
        for (const state of this.#states.values()) state.control.stop(reason);
        const pending = [...this.#running.values(), ...this.#takes];
        if (pending.length === 0 || late) return;
        await Promise.race([Promise.allSettled(pending), timedOut]);
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Runs `work` — a claim, a dispatch, a sweep, a wake: whatever may take
   * runs for this process and hand them to trackTaken before it resolves —
   * as a take in flight, which shutdown waits for: a run it takes once the
   * shutdown has begun is given up before the engine's pool may close, not
   * left to its lease.
   */
  taking<T>(work: () => Promise<T>): Promise<T> {
    const done = work();
    // Out of the set before it settles: a shutdown waiting for it finds the set without it.
    const forget = () => {
      this.#takes.delete(settled);
    };
    const settled = done.then(forget, forget);
    this.#takes.add(settled);
    return done;
  }

  /** Registers an execution so that local callers can wait for it. */
  track(lease: Lease, execute: () => Promise<Settled>): Promise<Settled> {
    const id = idOf(lease);
    // Continued here before its time came (an event, a sweep): its wake would only find it taken.
    this.#core.waker.disarm(lease);
    const done = execute().finally(() => {
      if (this.#running.get(id) === done) this.#running.delete(id);
      // Woken while this execution was still unwinding from its park: wake it now.
      if (this.#pendingWakes.delete(id)) this.#core.waker.wake(lease);
    });
    this.#running.set(id, done);
    return done;
  }

  /**
   * Registers an execution of a run this process took in the background (a
   * dispatch, a sweep, a wake) or by a caller's committed claim (engine.start,
   * a takeover) — unless the engine is shutting down: a take still in flight
   * when the shutdown began is not executed here. Its lease is given up at
   * once, as a run stopped at a step boundary gives it up, so that another
   * process's sweep takes it over (a queued run still holding its slot).
   */
  trackTaken(lease: Lease, execute: () => Promise<Settled>): Promise<Settled> {
    // Tracked as an execution, so that shutdown waits for the lease's release.
    if (this.#core.closing) return this.track(lease, () => this.#afterStop(lease, 'shutting_down', null));
    return this.track(lease, execute);
  }

  /**
   * Executes a run a claim of this process took over. A queued run's slot it
   * still held (its process died while it ran) is given back by the
   * transition that ends or parks it; its queue is dispatched then, so that
   * the next run in line starts at once, not at a sweep.
   */
  resumeClaimed(claim: { lease: Lease; heldQueue?: string }): Promise<Settled> {
    // Shutting down: given up at once, as any run this process takes then (trackTaken).
    const done = this.trackTaken(claim.lease, () => this.resumeOwned(claim.lease));
    const queue = claim.heldQueue;
    if (queue !== undefined) done.finally(() => this.#core.dispatcher.dispatchQueue(queue)).catch(() => {});
    return done;
  }

  /** Loads a run this process just took over (`fresh`: a dispatch read it, nothing recorded) and executes it under its own version. */
  async resumeOwned(lease: Lease, fresh?: FreshRun): Promise<Settled> {
    const { registry, deps, sql, clock } = this.#core;
    const loaded = fresh ? loadedFresh(fresh) : await inDatabase('loading a run', () => loadRun(sql, clock, lease));
    if (!loaded) throw new StepkeyError('run_not_found', `Run '${lease.key}' in scope '${lease.scope}' has no metadata.`);
    const definition = registry.get(loaded.workflow, loaded.version);
    if (!definition) {
      const known = registry.versions(loaded.workflow);
      return this.failOwned(
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
    deps.log.info(
      { event: 'run.resumed', scope: lease.scope, run: lease.key, workflow: loaded.workflow, version: loaded.version, finishedSteps: loaded.steps.size },
      `resuming run '${lease.key}' (${loaded.workflow} v${loaded.version}) after ${loaded.steps.size} finished steps`,
    );
    const parsed = definition.input.safeParse(JSON.parse(loaded.input));
    if (!parsed.success) {
      return this.failOwned(
        lease,
        loaded.parentRun,
        new StepkeyError('invalid_input', `The stored input of run '${lease.key}' no longer parses: ${summarise(parsed.error)}.`),
      );
    }
    return this.execute(lease, definition, parsed.data, loadedOptions(lease, loaded));
  }

  /** Executes a child run its parent's step has just claimed (see waits/children.ts). */
  executeChild(child: ChildStart): void {
    // Shutting down: the child is committed with a lease for this process; it is given up at once, for another's sweep.
    this.trackTaken(child.lease, () =>
      this.execute(child.lease, child.workflow, child.input, {
        rootKey: child.rootKey,
        finished: new Map(),
        parentRun: child.parentRun,
        deadlineAtMs: child.deadlineAtMs ?? null,
      }),
    ).catch((error: unknown) => this.#core.onError(error, `executing child run '${child.lease.key}'`));
  }

  /** Fails a run this process took but cannot execute; a child's parent waiting on it is woken, as by any child's end. */
  async failOwned(lease: Lease, parentRun: string | null, error: StepkeyError): Promise<Settled> {
    const { sql, clock, settings } = this.#core;
    const stored = serializeError(error);
    await inDatabase('failing a run', async () => {
      const failing = await Transaction.begin(sql, { acquireTimeoutMs: settings.leaseMs });
      await failing.commit(
        failRunStatement(failing.sql, clock, lease, toJsonText(stored, 'error'), { retentionMs: settings.retentionMs }),
        ...wakeParentStatements(failing.sql, clock, lease, parentRun),
      );
    });
    if (parentRun) this.#core.waker.wake({ scope: lease.scope, key: parentRun });
    return { state: 'failed', error: stored };
  }

  /** Executes the run under `lease`: its workflow function, then its outcome; restarted from the ledger after a conflict. */
  async execute(lease: Lease, workflow: Workflow, input: unknown, options: RunStateOptions): Promise<Settled> {
    const id = idOf(lease);
    let state = newRunState(this.#core.deps, lease, options);
    let deadline: NodeJS.Timeout | undefined;
    const watch = (watched: RunState) => {
      clearTimeout(deadline);
      const atMs = watched.control.deadlineAtMs;
      if (atMs === undefined) return;
      // At the deadline the run stops at once: a call in flight is aborted through its signal. The
      // time is read again at least every second (stepkey's clock can be moved, or differ from this host's).
      const check = () => {
        const inMs = atMs - (Date.now() + this.#core.clock.offsetMs);
        if (inMs <= 0) return watched.control.stop('deadline');
        deadline = setTimeout(check, Math.min(inMs, 1_000));
        deadline.unref();
      };
      check();
    };
    try {
      this.#states.set(id, state);
      watch(state);
      let settled = await executeRun(state, workflow, input, this.#core.extensions);
      // Another holder committed a step first, or a commit's connection went: start again from
      // what the ledger holds.
      for (let restart = 0; settled.state === 'stopped' && settled.reason === 'conflict' && restart < 3; restart += 1) {
        // Shutting down: not started again here; its lease is given up.
        if (this.#core.closing) {
          settled = { state: 'stopped', reason: 'shutting_down' };
          break;
        }
        const loaded = await this.#reload(lease);
        // No row: the run's start rode in the transaction whose connection went. Nothing of it
        // exists, and the caller's retry starts it afresh.
        if (loaded === 'unavailable' || loaded === undefined) {
          settled = { state: 'stopped', reason: loaded ? 'unavailable' : 'start_lost' };
          break;
        }
        state = newRunState(this.#core.deps, lease, loadedOptions(lease, loaded));
        this.#states.set(id, state);
        watch(state);
        settled = await executeRun(state, workflow, input, this.#core.extensions);
      }
      instrument.runEnded(workflow, settled.state);
      if (settled.state === 'stopped') return await this.#afterStop(lease, settled.reason, state.parentRun);
      if (settled.state === 'waiting' && !this.#core.closing) this.#core.waker.arm(lease, settled.wait);
      return settled;
    } finally {
      clearTimeout(deadline);
      if (this.#states.get(id) === state) this.#states.delete(id);
    }
  }

  /**
   * Loads a run again after its execution stopped on a conflict. A database
   * that is down is waited for, for up to a lease; past it the run is left
   * to whichever sweeper runs once it is back.
   */
  async #reload(lease: Lease): Promise<LoadedRun | undefined | 'unavailable'> {
    const { sql, clock, settings } = this.#core;
    const deadline = Date.now() + settings.leaseMs;
    for (let delay = 100; ; delay = Math.min(delay * 2, 1_000)) {
      try {
        return await inDatabase('reloading a run', () => loadRun(sql, clock, lease));
      } catch (error) {
        if (!isUnavailable(error)) throw error;
        if (Date.now() + delay > deadline || this.#core.closing) return 'unavailable';
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /** What an execution that stopped leaves: its lease given up, the run ended at its deadline, or the run as someone else left it. */
  async #afterStop(lease: Lease, reason: StopReason, parentRun: string | null): Promise<Settled> {
    const { sql, clock, settings } = this.#core;
    if (reason === 'start_lost') return { state: 'stopped', reason };
    if (reason === 'shutting_down' || reason === 'conflict' || reason === 'unavailable') {
      await expireRunLease(sql, clock, lease).catch((error: unknown) => this.#core.onError(error, `releasing the lease of run '${lease.key}'`));
      return { state: 'stopped', reason };
    }
    if (reason === 'deadline') {
      const outcome = deadlineExceededOutcome();
      const descendant: StoredError = { name: 'RunCancelled', message: `its ancestor run '${lease.key}' did not finish before its deadline`, data: { root: lease.key } };
      const ended = await inDatabase('ending a run at its deadline', () =>
        inTransactionRetryingDeadlock(sql, (tx) =>
          endTreeIn(tx, clock, lease, { status: 'deadline_exceeded', outcome, descendant, fence: lease }, settings.retentionMs),
        ),
      );
      if (ended.applied) {
        this.stop(lease.scope, ended.keys.slice(1), 'lease_lost');
        if (parentRun) this.#core.waker.wake({ scope: lease.scope, key: parentRun });
        return { state: 'deadline_exceeded', reason: outcome };
      }
    }
    const row = await inDatabase('reading a run', () => readRow(sql, lease));
    if (row && (row.status === 'completed' || row.status === 'cancelled' || row.status === 'deadline_exceeded')) return settledFromRow(row);
    return { state: 'stopped', reason: reason === 'deadline' ? 'lease_lost' : reason };
  }
}

/** The state options of a run loaded from the ledger. */
function loadedOptions(lease: Lease, loaded: LoadedRun): RunStateOptions {
  return {
    rootKey: storedRootKey(lease.scope, lease.key, loaded.rootKey),
    finished: loaded.steps,
    attempts: loaded.stepAttempts,
    wait: loaded.wait,
    loadedAtMs: loaded.loadedAtMs,
    parentRun: loaded.parentRun,
    trace: loaded.trace,
    deadlineAtMs: loaded.deadlineAtMs,
  };
}

