/**
 * The heartbeat: every lease this process holds is extended in one
 * statement, every third of a lease. An execution that made no progress for
 * a lease (waiting on a connection that never comes, say) is let go: its
 * lease runs out and another process takes the run over. A lease missing
 * from the answer was taken over or cancelled: its execution stops.
 */
import { translateDatabaseError } from '../errors/pg-errors.js';
import { heartbeatRuns } from '../lifecycle/leases.js';
import type { RunState } from '../workflow/run-state.js';
import type { EngineCore } from './core.js';
import { idOf } from './options.js';

export class Heartbeat {
  readonly #core: EngineCore;
  readonly #timer: NodeJS.Timeout;

  constructor(core: EngineCore) {
    this.#core = core;
    this.#timer = setInterval(() => void this.beat(), core.settings.heartbeatMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async beat(): Promise<void> {
    const { sql, clock, settings } = this.#core;
    // A run whose start has not committed yet has no row to extend.
    const now = Date.now();
    const states: RunState[] = [];
    for (const state of this.#core.runs.states()) {
      if (state.buffer.startPending) continue;
      if (state.control.stalled(now)) state.control.stop('lease_lost');
      else states.push(state);
    }
    if (states.length === 0) return;
    const sentAt = Date.now();
    try {
      const held = await heartbeatRuns(sql, clock, states.map((state) => state.lease), settings.leaseMs);
      const alive = new Set(held.map(idOf));
      for (const state of states) {
        if (!alive.has(idOf(state.lease))) state.control.stop('lease_lost');
        else state.control.heldUntil = sentAt + settings.leaseMs;
      }
    } catch (error) {
      this.#core.onError(translateDatabaseError(error, 'extending run leases'), 'heartbeat');
      // A lease that cannot be renewed runs out: an execution whose lease would end before the next
      // beat stops now — its calls aborted — so that no call of it is still in flight once another
      // process may take the run over (and reconcile what it did).
      for (const state of states) {
        if (Date.now() + settings.heartbeatMs + settings.leaseMs / 10 >= state.control.heldUntil) state.control.stop('lease_lost');
      }
    }
  }
}
