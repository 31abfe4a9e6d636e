/**
 * The sweeper: once a sweep interval, this process takes over runs whose
 * lease expired and parked runs that are due, and resumes them, as many as it
 * has room for; dispatches its queues; and ends the runs past their deadline
 * that no live process holds — for a run of any version, in SQL, its
 * descendants cancelled with it (lifecycle/tree.ts); and, on Citus, gives
 * back the limit slots of runs that stopped executing without giving them
 * back (flow/limit-release.ts). A sweep that filled every
 * free slot sweeps again as soon as one of its runs ends, so a backlog of due
 * runs drains at the pace the process can execute them, not a batch per
 * interval.
 */
import { randomUUID } from 'node:crypto';
import type { StoredError } from '../ledger/outcome.js';
import type { KeyRef } from '../ledger/types.js';
import { deadlineExceededOutcome } from '../lifecycle/deadline.js';
import { sweepExpiredRuns } from '../lifecycle/sweep.js';
import { endTreeIn } from '../lifecycle/tree.js';
import { instrument } from '../telemetry/instrumentation.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { tablesDistributed } from '../db/citus.js';
import { inTransactionRetryingDeadlock } from '../db/retrying-transaction.js';
import { inDatabase, type EngineCore } from './core.js';

/** Runs past their deadline one sweep ends at most. */
const DEADLINES_PER_SWEEP = 100;

export class Sweeper {
  readonly #core: EngineCore;
  #timer: NodeJS.Timeout | undefined;
  #sweeping = false;
  /** The last sweep filled every free slot: more due work is likely waiting. */
  #backlog = false;
  /** A run of a backlog ended while a sweep was in flight: sweep again when it ends. */
  #again = false;

  constructor(core: EngineCore) {
    this.#core = core;
  }

  /** Sweeps every `sweepIntervalMs` until stopped; keeps the process alive meanwhile. */
  start(): void {
    if (this.#timer || this.#core.closing) return;
    this.#timer = setInterval(() => {
      this.sweep().catch((error: unknown) => this.#core.onError(error, 'sweeping'));
    }, this.#core.settings.sweepIntervalMs);
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One sweep, a take in flight (LocalRuns.taking); returns how many runs it took, dispatched or ended. */
  sweep(): Promise<number> {
    return this.#core.runs.taking(() => this.#sweep());
  }

  async #sweep(): Promise<number> {
    const core = this.#core;
    if (core.closing) return 0;
    if (this.#sweeping) {
      // Room came free during a sweep of a backlog: sweep again right after it, not at the next interval.
      if (this.#backlog) this.#again = true;
      return 0;
    }
    this.#sweeping = true;
    try {
      const capacity = Math.max(0, core.settings.wakeRoom - core.waker.admitted - core.waker.inFlight);
      const tokens = Array.from({ length: capacity }, () => randomUUID());
      const { taken, pastDeadline } = await inDatabase('sweeping expired, due and past-deadline runs', async () =>
        sweepExpiredRuns(core.sql, core.clock, tokens, core.settings.leaseMs, core.versions(), DEADLINES_PER_SWEEP, {
          skipLocked: !(await tablesDistributed(core.sql)),
        }),
      );
      const ended = await this.#endPastDeadline(pastDeadline);
      if (capacity <= 0) {
        await this.#giveBackLimitSlots();
        return ended;
      }
      this.#backlog = taken.length >= capacity;
      instrument.sweptRuns(taken.length);
      for (const run of taken) {
        const lease = { scope: run.scope, key: run.key, token: run.token };
        core.deps.log.info(
          { event: run.woken ? 'run.woken' : 'run.takeover', scope: run.scope, run: run.key, executions: run.attempts },
          run.woken ? `run '${run.key}' is due; continuing it` : `took over run '${run.key}': its lease expired (its process died or stalled)`,
        );
        core.waker
          .admit(core.runs.trackTaken(lease, () => core.runs.resumeOwned(lease)))
          .catch((error: unknown) => core.onError(error, `resuming run '${run.key}'`))
          .finally(() => {
            // A run taken over that held a slot gave it back at its end: its queue is dispatched,
            // waiting for the queue's lock (a dispatch running now may have counted the slot as held),
            // even with no room here (no other process will). Any other: every queue, with the room it left.
            core.dispatcher.dispatchAfterEnd(run.queue ?? undefined, 0, run.queue !== null);
            if (this.#backlog && this.#timer) void this.sweep().catch((error: unknown) => core.onError(error, 'sweeping'));
          });
      }
      await this.#giveBackLimitSlots();
      return ended + taken.length + (await core.dispatcher.sweep(capacity - taken.length));
    } finally {
      this.#sweeping = false;
      if (this.#again) {
        this.#again = false;
        if (this.#timer) void this.sweep().catch((error: unknown) => core.onError(error, 'sweeping'));
      }
    }
  }

  /**
   * On Citus: the limit slots runs left when they stopped executing, given back on the coordinator
   * (after the runs this sweep took are admitted; a failure is reported, and the next sweep tries again).
   */
  async #giveBackLimitSlots(): Promise<void> {
    const core = this.#core;
    try {
      for (const ref of (await core.deps.limits?.sweep((error, context) => core.onError(error, context))) ?? []) core.waker.wake(ref);
    } catch (error) {
      core.onError(translateDatabaseError(error, 'giving back limit slots'), 'giving back limit slots');
    }
  }

  /** Ends the runs past their deadline that no live process holds, each in its own transaction. */
  async #endPastDeadline(due: readonly KeyRef[]): Promise<number> {
    const core = this.#core;
    let ended = 0;
    for (const ref of due) {
      if (core.closing) break;
      try {
        if (await this.#endAtDeadline(ref)) ended += 1;
      } catch (error) {
        core.onError(error, `ending run '${ref.key}' at its deadline`);
      }
    }
    return ended;
  }

  async #endAtDeadline(ref: KeyRef): Promise<boolean> {
    const core = this.#core;
    const outcome = deadlineExceededOutcome();
    const descendant: StoredError = { name: 'RunCancelled', message: `its ancestor run '${ref.key}' did not finish before its deadline`, data: { root: ref.key } };
    const ended = await inDatabase('ending a run at its deadline', () =>
      inTransactionRetryingDeadlock(core.sql, (tx) =>
        endTreeIn(tx, core.clock, ref, { status: 'deadline_exceeded', outcome, descendant, pastDeadline: true }, core.settings.retentionMs),
      ),
    );
    if (!ended.applied) return false;
    core.deps.log.info({ event: 'run.deadline_exceeded', scope: ref.scope, run: ref.key, cancelled: ended.keys.length - 1 }, `run '${ref.key}' passed its deadline`);
    core.runs.stop(ref.scope, ended.keys, 'lease_lost');
    if (ended.parentRun) core.waker.wake({ scope: ref.scope, key: ended.parentRun });
    return true;
  }
}
