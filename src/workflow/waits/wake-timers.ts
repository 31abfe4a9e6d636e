/**
 * Prompt wakes for runs this process has just parked on a time: a sleep, an
 * event's deadline, a rate limit's next token. Without them such a run is
 * continued by the first sweep after it is due — up to a sweep interval late,
 * which for a rate limit means tokens left unused, and for a short sleep a
 * run that sleeps much longer than it asked.
 *
 * A timer is only a hint: when it fires, the engine's wake takes the run if
 * it is still parked and due and this process has room (wakeDueRun, one
 * conditional UPDATE; any sweeper may have taken it first). If it took
 * nothing and the run is still parked, one read says why: not due yet by
 * the database's clock (the timer is armed again, by the database's delay),
 * or due on a queue without a slot (the queue is dispatched). Without room
 * it does nothing — the sweep stays the guarantee. Timers are kept for waits
 * due within `horizonMs`, one per run, at most `maxTimers` at once (beyond
 * that the sweep wakes the run: a process parking many runs holds no memory
 * per run past the cap), unref'd; dropped when the run executes here again
 * before its time, and at shutdown.
 */
import type { KeyRef } from '../../ledger/types.js';
import type { RunWaitView } from '../../lifecycle/wait.js';

/** The kinds of wait that end at a time of their own (a slot, a child or a review is woken by whoever ends it). */
const TIMED = new Set(['timer', 'event', 'limit']);

/** How far past the wake time a timer fires, so that the database's clock has passed it too. */
const SLACK_MS = 5;

export class WakeTimers {
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #wake: (ref: KeyRef) => void;
  readonly #now: () => number;
  readonly #horizonMs: number;
  readonly #maxTimers: number;

  /** `now`: stepkey's clock in ms (the wall clock plus a test's offset). */
  constructor(options: { wake: (ref: KeyRef) => void; now: () => number; horizonMs: number; maxTimers: number }) {
    this.#wake = options.wake;
    this.#now = options.now;
    this.#horizonMs = options.horizonMs;
    this.#maxTimers = options.maxTimers;
  }

  /** Timers armed now. */
  get size(): number {
    return this.#timers.size;
  }

  /** Arms a wake for a run that parked here on `wait`, if it ends at a time within the horizon. */
  arm(ref: KeyRef, wait: RunWaitView): void {
    if (!wait.until || !TIMED.has(wait.kind)) return;
    this.armIn(ref, wait.until.getTime() - this.#now());
  }

  /**
   * Arms a wake `delayMs` from now. A wake that found the run not due yet —
   * the database's clock behind this host's — arms again with the delay the
   * database gave.
   */
  armIn(ref: KeyRef, delay: number): void {
    if (delay > this.#horizonMs) return;
    const id = `${ref.scope}\u001f${ref.key}`;
    if (this.#timers.size >= this.#maxTimers && !this.#timers.has(id)) return;
    clearTimeout(this.#timers.get(id));
    const timer = setTimeout(() => {
      this.#timers.delete(id);
      this.#wake({ scope: ref.scope, key: ref.key });
    }, Math.max(0, delay) + SLACK_MS);
    timer.unref();
    this.#timers.set(id, timer);
  }

  /** Drops the run's wake: it is executing here again (woken by an event, a sweep, a duplicate…). */
  disarm(ref: KeyRef): void {
    const id = `${ref.scope}\u001f${ref.key}`;
    clearTimeout(this.#timers.get(id));
    this.#timers.delete(id);
  }

  clear(): void {
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }
}
