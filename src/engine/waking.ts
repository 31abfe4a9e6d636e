/**
 * Waking: a parked run that is due continues at once in this process when it
 * runs the run's version — after an event it sent, a child's end, a slot, a
 * resolution, or its own timer (waits/wake-timers.ts arms one for the runs
 * parked here on a time). Otherwise the next sweep takes it, here or
 * anywhere. Woken runs (and runs the sweep takes over) have a room of their
 * own, `wakeRoom`: at most `maxConcurrentRuns`, less a share of the pool
 * left to the process's callers; runs a caller starts do not take it. A wake
 * that finds no room waits in a bounded line and is taken as soon as a woken
 * run here ends, not a sweep interval later.
 */
import { randomUUID } from 'node:crypto';
import { translateDatabaseError } from '../errors/pg-errors.js';
import type { KeyRef, Lease } from '../ledger/types.js';
import type { RunWaitView } from '../lifecycle/wait.js';
import { stillParked, takeDueRun } from '../lifecycle/wake.js';
import { WakeTimers } from '../workflow/waits/wake-timers.js';
import type { EngineCore } from './core.js';

/** Runs parked here on a wait due within this long get a prompt wake at its time (later ones: the sweep). */
const WAKE_HORIZON_MS = 60_000;
/** Prompt wakes armed at once, at most (past it, the sweep wakes the run). */
const MAX_WAKE_TIMERS = 10_000;
/** Wakes that found no room, kept for the next free room (past it, the sweep wakes the run). */
const MAX_WAITING_WAKES = 1_000;

export class Waker {
  readonly #core: EngineCore;
  readonly #timers: WakeTimers;
  /** Wakes whose take is in flight: room they hold until the run they take is running. */
  #waking = 0;
  /** Runs woken or taken over here, executing now (see admit). */
  #admitted = 0;
  /** Due runs whose wake found no room, first come first; each taken when a woken run here ends. */
  readonly #waiting = new Map<string, { ref: KeyRef; missed: ((ref: KeyRef) => Promise<void>) | undefined }>();

  constructor(core: EngineCore) {
    this.#core = core;
    this.#timers = new WakeTimers({
      wake: (ref) => this.wake(ref, (missed) => this.#afterTimerMiss(missed)),
      now: () => Date.now() + core.clock.offsetMs,
      horizonMs: WAKE_HORIZON_MS,
      maxTimers: MAX_WAKE_TIMERS,
    });
  }

  /** Wakes whose take is in flight. */
  get inFlight(): number {
    return this.#waking;
  }

  /**
   * A prompt wake: takes the parked run now if it is due and this process
   * runs its version, and continues it here. Otherwise the next sweep does.
   */
  wake(ref: KeyRef, missed?: (ref: KeyRef) => Promise<void>): void {
    const core = this.#core;
    if (core.closing || core.runs.wakeAfter(ref)) return;
    if (this.#admitted + this.#waking >= core.settings.wakeRoom) {
      if (this.#waiting.size < MAX_WAITING_WAKES) this.#waiting.set(`${ref.scope}\u001f${ref.key}`, { ref, missed });
      return;
    }
    this.#waking += 1;
    const failed = (error: unknown) => core.onError(translateDatabaseError(error, 'waking a run'), `waking run '${ref.key}'`);
    void core.runs.taking(async () => {
      let taken;
      try {
        taken = await takeDueRun(core.sql, core.clock, ref, randomUUID(), core.settings.leaseMs, core.versions());
      } finally {
        this.#waking -= 1;
      }
      if (!taken) {
        this.roomFreed();
        return missed?.(ref);
      }
      const lease = { scope: taken.scope, key: taken.key, token: taken.token };
      // Its execution is not awaited: the take ends once it is tracked (shutdown waits for that).
      void this.admit(core.runs.trackTaken(lease, () => core.runs.resumeOwned(lease))).catch(failed);
    }).catch(failed);
  }

  /** Runs woken or taken over here, executing now. */
  get admitted(): number {
    return this.#admitted;
  }

  /**
   * Counts an execution of a run this process woke or took over (its wake
   * or its sweep) against `wakeRoom` until it ends: runs a caller started do
   * not take a woken run's room, nor the reverse.
   */
  admit<T>(execution: Promise<T>): Promise<T> {
    this.#admitted += 1;
    return execution.finally(() => {
      this.#admitted -= 1;
      this.roomFreed();
    });
  }

  /** A woken run here ended: its room goes to the longest-waiting wake, if any. */
  roomFreed(): void {
    const core = this.#core;
    while (this.#waiting.size > 0 && !core.closing && this.#admitted + this.#waking < core.settings.wakeRoom) {
      const [id, first] = this.#waiting.entries().next().value as [string, { ref: KeyRef; missed: ((ref: KeyRef) => Promise<void>) | undefined }];
      this.#waiting.delete(id);
      this.wake(first.ref, first.missed);
    }
  }

  /** A duplicate found the run parked and due (its sweeper has not come yet): wake it here. */
  wakeIfDue(ref: KeyRef, wait: RunWaitView): void {
    if (wait.until && wait.until.getTime() <= Date.now() + this.#core.clock.offsetMs) this.wake(ref);
  }

  /** Arms a prompt wake for a run that has just parked here on a time. */
  arm(lease: Lease, wait: RunWaitView): void {
    this.#timers.arm(lease, wait);
  }

  disarm(ref: KeyRef): void {
    this.#timers.disarm(ref);
  }

  clear(): void {
    this.#timers.clear();
    this.#waiting.clear();
  }

  /** A timer's wake took nothing: the run not due yet by the database's clock, or due on a queue (waits/wake-timers.ts). */
  async #afterTimerMiss(ref: KeyRef): Promise<void> {
    const core = this.#core;
    if (core.closing) return;
    const parked = await stillParked(core.sql, core.clock, ref);
    if (!parked) return;
    if (parked.queue !== null) core.dispatcher.dispatchQueue(parked.queue);
    else if (parked.due_in_ms !== null && parked.due_in_ms > 0) this.#timers.armIn(ref, parked.due_in_ms);
  }
}
