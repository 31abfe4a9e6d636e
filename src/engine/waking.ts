/**
 * Waking: a parked run that is due continues at once in this process when it
 * runs the run's version — after an event it sent, a child's end, a slot, a
 * resolution, or its own timer (waits/wake-timers.ts arms one for the runs
 * parked here on a time). Otherwise the next sweep takes it, here or
 * anywhere. Wakes share the room of `maxConcurrentRuns` with the runs this
 * process executes.
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

export class Waker {
  readonly #core: EngineCore;
  readonly #timers: WakeTimers;
  /** Wakes whose take is in flight: room they hold until the run they take is running. */
  #waking = 0;

  constructor(core: EngineCore) {
    this.#core = core;
    this.#timers = new WakeTimers({
      wake: (ref) => this.wake(ref, (missed) => this.#afterTimerMiss(missed)),
      now: () => Date.now() + core.clock.offsetMs,
      horizonMs: WAKE_HORIZON_MS,
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
    if (core.closing || core.runs.size + this.#waking >= core.settings.maxConcurrentRuns) return;
    if (core.runs.wakeAfter(ref)) return;
    this.#waking += 1;
    void (async () => {
      let taken;
      try {
        taken = await takeDueRun(core.sql, core.clock, ref, randomUUID(), core.settings.leaseMs, core.versions());
      } finally {
        this.#waking -= 1;
      }
      if (!taken) return missed?.(ref);
      const lease = { scope: taken.scope, key: taken.key, token: taken.token };
      await core.runs.track(lease, () => core.runs.resumeOwned(lease));
    })().catch((error: unknown) => core.onError(translateDatabaseError(error, 'waking a run'), `waking run '${ref.key}'`));
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
