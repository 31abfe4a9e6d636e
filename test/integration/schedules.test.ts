/**
 * Schedules: one run per tick however many workers fire it; a worker that
 * starts runs each tick missed within its backfill once; a cron expression
 * that does not parse, or an input the workflow refuses, is refused when the
 * schedule is defined.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSchedule } from '../../src/schedules/define-schedule.js';
import { startTick } from '../../src/schedules/schedule-task.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';

const db = useTestDatabase({ max: 40 });
const MINUTE = 60_000;

const report = defineWorkflow({
  name: 'schedules-report',
  version: 1,
  input: z.object({ day: z.string() }),
  steps: { build: step('build.v1') },
  async run({ input, steps }) {
    return steps.build.call(async () => `report for ${input.day}`);
  },
});

const runsOf = async (scope: string) =>
  (await db().sql<{ key: string }[]>`select key from stepkey.ledger where scope = ${scope} and kind = 'run' order by key`).map((r) => r.key);

describe('defineSchedule', () => {
  it('refuses a cron expression that does not parse, a bad name, and an input the workflow refuses', () => {
    expect(() => defineSchedule({ name: 'bad-cron', cron: '61 * * * *', workflow: report, input: { day: 'x' }, scope: 's' })).toThrow(
      /Schedule 'bad-cron': the cron expression "61 \* \* \* \*" does not parse/,
    );
    expect(() => defineSchedule({ name: 'nope', cron: 'every day', workflow: report, input: { day: 'x' }, scope: 's' })).toThrow(/does not parse/);
    expect(() => defineSchedule({ name: 'has space', cron: '* * * * *', workflow: report, input: { day: 'x' }, scope: 's' })).toThrow(
      /the name must be/,
    );
    expect(() => defineSchedule({ name: 'bad-input', cron: '* * * * *', workflow: report, input: { day: 3 } as never, scope: 's' })).toThrow(
      /its input does not fit workflow 'schedules-report': day:/,
    );
    expect(() => defineSchedule({ name: 'bad-backfill', cron: '* * * * *', workflow: report, input: { day: 'x' }, scope: 's', backfill: -1 })).toThrow(
      /backfill must be/,
    );
  });
});

describe('a tick', () => {
  it('is one run, however many workers start it at once', async () => {
    const schedule = defineSchedule({ name: 'tick-once', cron: '* * * * *', workflow: report, input: (tick) => ({ day: tick.toISOString() }), scope: 'ticks' });
    const engines = [0, 1, 2].map(() => testEngine(db(), [report]));
    const ticks = Array.from({ length: 20 }, (_, i) => new Date(Date.UTC(2026, 11, 1, 0, i)));
    const started = await Promise.all(ticks.flatMap((tick) => engines.map((engine) => startTick(engine, schedule, tick))));
    expect(started.filter((s) => s.started)).toHaveLength(20);
    expect(await runsOf('ticks')).toEqual(ticks.map((tick) => `tick-once@${tick.toISOString()}`));
    await Promise.all(engines.map((engine) => engine.shutdown()));
  });
});

describe('three workers running one schedule', () => {
  it('run each tick missed within the backfill once, one run per tick', async () => {
    const scope = 'backfilled';
    const schedule = defineSchedule({
      name: 'nightly',
      cron: '* * * * *',
      workflow: report,
      input: (tick) => ({ day: tick.toISOString() }),
      scope,
      backfill: 30 * MINUTE,
    });
    const start = () => runWorker({ database: db(), schedules: [schedule], purgeSchedule: false, concurrency: 2, onError: () => {} });
    // A worker makes the schedule known, then every worker is gone for 20 minutes.
    const first = await start();
    await first.stop();
    await db().sql`update graphile_worker._private_known_crontabs
                      set known_since = date_trunc('minute', now()) - interval '25 minutes',
                          last_execution = date_trunc('minute', now()) - interval '20 minutes'
                    where identifier = ${schedule.task}`;
    const [{ from }] = (await db().sql`select (extract(epoch from last_execution) * 1000)::float8 as from
                                          from graphile_worker._private_known_crontabs where identifier = ${schedule.task}`) as unknown as [{ from: number }];
    const workers: Worker[] = await Promise.all([start(), start(), start()]);
    const expected = (upTo: number) => {
      const keys: string[] = [];
      for (let t = from + MINUTE; t <= upTo; t += MINUTE) keys.push(`nightly@${new Date(t).toISOString()}`);
      return keys;
    };
    await expect.poll(async () => (await runsOf(scope)).length).toBeGreaterThanOrEqual(20);
    await expect
      .poll(async () => (await db().sql`select count(*)::int as n from stepkey.ledger where scope = ${scope} and kind = 'run' and status <> 'completed'`)[0]!.n)
      .toBe(0);
    const runs = await runsOf(scope);
    const nowFloor = Math.floor(Date.now() / MINUTE) * MINUTE;
    // Every missed tick ran once (a tick that came while the test ran is one more run, once too).
    expect(runs.slice(0, 20)).toEqual(expected(from + 20 * MINUTE));
    expect(runs).toEqual(expected(nowFloor).filter((key) => runs.includes(key)));
    expect(new Set(runs).size).toBe(runs.length);
    await Promise.all(workers.map((worker) => worker.stop()));
  });
});
