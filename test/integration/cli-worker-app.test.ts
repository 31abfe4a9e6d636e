/**
 * `stepkey worker` runs everything the app module declares: its schedules
 * tick (each tick one run), the runs waiting on its queues are dispatched,
 * the limits its steps name are registered — and it says so at start. An app
 * module that exports a definition stepkey would not run is refused, naming it.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript } from '../../src/testing/child-process.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { appModule, useCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { everyMinute, partner, reports, throttled, ticked } from '../helpers/scripts/cli-app-flow.js';

const db = useTestDatabase();
const { cli } = useCli(db);
const flowApp = appModule('cli-app-flow');

async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, output: () => string): Promise<T> {
  for (const deadline = Date.now() + PATIENCE_MS; ; ) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: still ${JSON.stringify(value)}; worker output:\n${output()}`);
    await sleep(100);
  }
}

describe('stepkey worker with schedules, queues and limits', () => {
  it('ticks the schedule, dispatches the queue, registers the limit, and says what it runs', async () => {
    // The schedule was known to an earlier worker, which last ran it three minutes ago: the ticks since are due.
    await db().sql`insert into graphile_worker._private_known_crontabs (identifier, known_since, last_execution)
                   values (${everyMinute.task}, date_trunc('minute', now()) - interval '5 minutes',
                           date_trunc('minute', now()) - interval '3 minutes')`;
    // A run waits on the queue (delayed by a second, so the enqueuing process does not start it, however slow the
    // host); only a worker that serves the queue can, once it is due.
    const ref = { scope: 'cli-queued', key: uniqueKey('report') };
    const enqueuer = testEngine(db(), [throttled], { queues: [reports], limits: [partner] });
    const handle = await enqueuer.enqueue(throttled, ref, { n: 21 }, { queue: reports, delayMs: 1_000 });
    expect(handle.queued).toBe(true);
    await enqueuer.shutdown();

    const worker = spawnScript('src/cli/main.ts', {
      args: ['worker', '--app', flowApp, '--database', db().url, '--concurrency', '2'],
      env: { STEPKEY_LEASE_MS: '2000', DATABASE_URL: undefined },
    });
    try {
      await worker.waitFor(/running on .*: 2 workflow versions, 0 effects, 1 schedule, 1 queue, 1 step limit, concurrency 2\./, PATIENCE_MS);
      await worker.waitFor(/ {2}limits {5}cli-partner \(2 at once\)\n/, PATIENCE_MS);
      expect(worker.output()).toContain('  workflows  cli-ticked@1, cli-throttled@1\n');
      expect(worker.output()).toContain("  schedules  cli-every-minute (* * * * * UTC: cli-ticked@1 in scope 'cli-scheduled')\n");
      expect(worker.output()).toContain('  queues     cli-reports (1 slot)\n');

      const ticks = await until(
        'the ticks since the last execution',
        async () =>
          (await db().sql`select key, status from stepkey.ledger where scope = 'cli-scheduled' and kind = 'run' order by key`) as unknown as {
            key: string;
            status: string;
          }[],
        (rows) => rows.length >= 3 && rows.every((row) => row.status === 'completed'),
        worker.output,
      );
      expect(ticks.every((row) => row.key.startsWith('cli-every-minute@'))).toBe(true);
      expect(new Set(ticks.map((row) => row.key)).size).toBe(ticks.length);

      const [queued] = await until(
        'the queued run',
        async () => (await db().sql`select status, outcome from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`) as unknown as { status: string; outcome: string }[],
        (rows) => rows[0]?.status === 'completed',
        worker.output,
      );
      expect(JSON.parse(queued!.outcome)).toBe(42);
      const [limit] = await db().sql`select concurrency from stepkey.limits where name = 'cli-partner'`;
      expect(limit).toEqual({ concurrency: 2 });

      worker.kill('SIGTERM');
      expect(await worker.exited).toEqual({ code: 0, signal: null });
    } finally {
      worker.kill('SIGKILL');
    }
  });

  it('refuses queues and limits given to runWorker beside an engine of its own', async () => {
    const engine = testEngine(db(), [ticked]);
    await expect(runWorker({ database: db(), engine, queues: [reports] })).rejects.toThrow(/pass them to createEngine\(\{ queues, limits \}\)/);
    await engine.shutdown();
  });
});

describe('an app module that exports what stepkey would not run', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stepkey-stray-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const module = async (name: string, text: string) => {
    const path = join(dir, `${name}.ts`);
    await writeFile(path, `import * as app from ${JSON.stringify(flowApp)};\n${text}\n`);
    return path;
  };

  it.each([
    [
      'a schedule outside `schedules`',
      'export const workflows = app.workflows;\nexport const nightly = app.everyMinute;',
      /exports 'nightly', one of schedules made with defineSchedule\(\) \('cli-every-minute'\) that is not in its 'schedules': stepkey would not run it/,
    ],
    [
      'queues under another name',
      'export const workflows = app.workflows;\nexport const lanes = [app.reports];',
      /exports 'lanes', an array holding queues made with defineQueue\(\) \('cli-reports'\), which stepkey does not read/,
    ],
    [
      'a list under its singular name',
      "export const workflows = app.workflows;\nexport const migration = [{ folder: './drizzle' }];",
      /exports 'migration', which stepkey does not read: did you mean 'migrations'\?/,
    ],
    ['a default export that is not an object', 'export default app.workflows;', /its default export must be an object of workflows, effects/],
  ])('refuses %s, naming it (exit 1, before anything starts)', async (_what, text, message) => {
    const path = await module(uniqueKey('stray'), text);
    const pools = async () => (await db().sql`select count(*)::int as n from stepkey.worker_pools`)[0]!.n as number;
    const before = await pools();
    const refused = await cli(['worker', '--app', path]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(message);
    expect(refused.stdout).toBe('');
    expect(await pools()).toBe(before);
  });

  it('takes helpers, and definitions its lists bring into play (a schedule\'s workflow, a limit a step names by definition)', async () => {
    const src = (path: string) => JSON.stringify(new URL(`../../src/${path}`, import.meta.url).pathname);
    const path = await module(
      uniqueKey('fine'),
      `import { defineLimit } from ${src('flow/define-limit.js')};
import { defineWorkflow, step } from ${src('workflow/define.js')};
export const bank = defineLimit({ name: 'cli-bank', concurrency: 1 });
const paying = defineWorkflow({ name: 'cli-paying', version: 1, input: app.ticked.input, steps: { pay: step('pay.v1', { limit: bank }) }, async run() { return 1; } });
export const workflows = [app.throttled, paying];
export const schedules = app.schedules;
export const ticked = app.ticked;
export const helper = (n: number) => n + 1;`,
    );
    const checked = await cli(['check', '--offline', '--write', '--manifest', join(dir, `${uniqueKey('manifest')}.json`), '--app', path]);
    expect(checked.stderr).toBe('');
    expect(checked.code).toBe(0);
  });
});
