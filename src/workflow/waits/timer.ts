/**
 * Durable timers: `sleep(ms)` and `sleepUntil(date)`. The wake time is
 * computed once, from stepkey's clock (the database's now, plus a test's
 * offset), and recorded with the park; a resumed or replayed run never
 * restarts its timer, and a time already past continues at once. A time that
 * is not one (negative, not finite, an invalid date) is refused at the call,
 * before anything is stored, as `invalid_input` — a stored error that ends
 * the run (errored), since no retry of the same code can fix it.
 */
import { NonRetryableError } from '../../ledger/outcome.js';
import type { StepUse } from '../handles.js';
import type { StepTarget } from '../steps.js';
import { runWait } from './settle.js';

export function sleepStep(target: StepTarget, ms: number, use: StepUse | undefined): Promise<void> {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    return Promise.reject(invalidInput(`Step '${target.declaration.name}': sleep(ms) needs a finite number of milliseconds ≥ 0, got ${String(ms)}.`));
  }
  return timer({ ...target, use }, (nowMs) => nowMs + ms);
}

export function sleepUntilStep(target: StepTarget, date: Date, use: StepUse | undefined): Promise<void> {
  if (!(date instanceof Date) || Number.isNaN(date.getTime())) {
    return Promise.reject(invalidInput(`Step '${target.declaration.name}': sleepUntil(date) needs a valid Date, got ${describe(date)}.`));
  }
  return timer({ ...target, use }, () => date.getTime());
}

function timer(target: StepTarget, wakeAt: (nowMs: number) => number): Promise<void> {
  const { state } = target;
  const over = (untilMs: number) => ({ ok: true, body: JSON.stringify({ until: new Date(untilMs).toISOString() }) });
  return runWait(
    target,
    'sleep',
    async ({ instance }, _q, nowMs) => {
      const untilMs = state.record.recordedWait(instance, 'timer')?.untilMs ?? wakeAt(nowMs);
      if (untilMs <= nowMs) return { finish: over(untilMs) };
      return { park: { kind: 'timer', step: instance, for: null, untilMs } };
    },
    () => undefined,
    // Woken at its time: the run was loaded after its wake time, by stepkey's clock.
    ({ instance }) => {
      const untilMs = state.record.recordedWait(instance, 'timer')?.untilMs;
      if (untilMs == null || state.record.loadedAtMs === undefined || untilMs > state.record.loadedAtMs) return undefined;
      return over(untilMs);
    },
  ) as Promise<void>;
}

function describe(value: unknown): string {
  if (value instanceof Date) return 'an invalid Date';
  return value === null ? 'null' : typeof value === 'string' ? `the string ${JSON.stringify(value)}` : typeof value;
}

/** A wait's argument that is not one: refused before anything is stored, and stored as the run's error. */
export function invalidInput(message: string): NonRetryableError {
  return new NonRetryableError(message, { code: 'invalid_input' });
}
