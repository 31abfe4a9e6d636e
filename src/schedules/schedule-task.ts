/**
 * The graphile-worker task behind a schedule: a tick's job starts the tick's
 * run (keyed by the schedule and the tick's time) and returns once the run's
 * start has committed — the run goes on like any other, resumed by sweepers
 * if its process dies. A second job for the same tick (a retried job, two
 * workers racing a backfill) finds the run and starts nothing.
 */
import type { Task } from 'graphile-worker';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Engine } from '../engine/engine.js';
import type { Schedule } from './define-schedule.js';

export function scheduleTask(engine: Engine, schedule: Schedule): Task {
  return async (payload) => {
    const ts = (payload as { _cron?: { ts?: unknown } } | null)?._cron?.ts;
    const tick = typeof ts === 'string' || ts instanceof Date ? new Date(ts) : undefined;
    if (!tick || Number.isNaN(tick.getTime())) {
      throw new StepkeyError('invalid_input', `Job of schedule '${schedule.name}' has no tick time (_cron.ts).`, { retryable: false });
    }
    await startTick(engine, schedule, tick);
  };
}

/** Starts the run of one tick, once: the same tick again joins or replays it. */
export async function startTick(engine: Engine, schedule: Schedule, tick: Date): Promise<{ key: string; started: boolean }> {
  const handle = await engine.start(schedule.workflow, { scope: schedule.scope, key: schedule.keyFor(tick) }, schedule.inputFor(tick) as never);
  return { key: handle.key, started: handle.started };
}
