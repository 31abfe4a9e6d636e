/**
 * A queued run's queue, partition and position, as `engine.get()`,
 * `stepkey runs` and `stepkey inspect` show it: the position is the run's
 * place in its partition's line, and dispatch starts the runs in exactly
 * that order (priority, then first enqueued).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { listRuns } from '../../src/read/sql/runs.js';
import { systemClock } from '../../src/db/clock.js';
import { useCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import type { Engine } from '../../src/engine/engine.js';

/** Each run waits in its step until the test lets it go; the order of starts is recorded. */
const started: string[] = [];
const gates = new Map<string, () => void>();
const startedOne = new Set<(key: string) => void>();
const hold = defineWorkflow({
  name: 'flow-read-hold',
  version: 1,
  input: z.object({ tenant: z.string(), n: z.number() }),
  steps: { hold: step('hold.v1') },
  async run({ steps, ctx }) {
    await steps.hold.call(
      () =>
        new Promise<void>((resolve) => {
          started.push(ctx.key);
          gates.set(ctx.key, resolve);
          for (const notify of startedOne) notify(ctx.key);
        }),
    );
  },
});

const line = defineQueue<{ tenant: string; n: number }>({ name: 'read-line', concurrency: 1 });
const tenants = defineQueue<{ tenant: string; n: number }>({
  name: 'read-tenants',
  concurrency: 2,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 1 },
});

function nextStart(): Promise<string> {
  return new Promise((resolve) => {
    const notify = (key: string) => {
      startedOne.delete(notify);
      resolve(key);
    };
    startedOne.add(notify);
  });
}

describe('a queued run in the read models', () => {
  const db = useTestDatabase();
  const { cli } = useCli(db);
  let engine: Engine | undefined;
  afterAll(async () => {
    for (const open of gates.values()) open();
    await engine?.shutdown({ timeoutMs: 5_000 });
  });

  it('shows queue, partition and position, and dispatch starts the runs in the order of their positions', async () => {
    engine = testEngine(db(), [hold], { queues: [line, tenants] });
    const firstStart = nextStart();
    await engine.enqueue(hold, { scope: 's', key: 'l-holder' }, { tenant: 'x', n: 0 }, { queue: line });
    expect(await firstStart).toBe('l-holder');
    // Priorities 0, 5, 0, 5, -1: dispatch takes 5s first (first enqueued first), then 0s, then -1.
    const priorities = [0, 5, 0, 5, -1];
    for (const [i, priority] of priorities.entries()) {
      await engine.enqueue(hold, { scope: 's', key: `l-${i}` }, { tenant: 'x', n: i }, { queue: line, priority });
    }
    const expectedOrder = ['l-1', 'l-3', 'l-0', 'l-2', 'l-4'];

    const holder = await engine.get({ scope: 's', key: 'l-holder' });
    expect(holder?.queue).toMatchObject({ queue: 'read-line', partition: '', holding: true, position: null });
    const positions: Record<string, number | null> = {};
    for (const key of expectedOrder) {
      const info = await engine.get({ scope: 's', key });
      expect(info?.status).toBe('waiting');
      expect(info?.wait?.kind).toBe('slot');
      expect(info?.queue).toMatchObject({ queue: 'read-line', partition: '', holding: false, partitionWaiting: 5, queueWaiting: 5 });
      positions[key] = info!.queue!.position;
    }
    expect(positions).toEqual({ 'l-1': 1, 'l-3': 2, 'l-0': 3, 'l-2': 4, 'l-4': 5 });

    // The runs listing has the same place for the rows it shows.
    const page = await listRuns(db().sql, systemClock, { limit: 50, order: 'attention', status: 'waiting' });
    const listed = Object.fromEntries(page.runs.filter((run) => run.key.startsWith('l-')).map((run) => [run.key, run.queue?.position]));
    expect(listed).toEqual(positions);

    const runs = await cli(['runs', '--status', 'waiting', '--json']);
    expect(runs.code).toBe(0);
    const json = runs.json<{ runs: { key: string; queue: { queue: string; position: number; enqueuedAt: string } | null }[] }>();
    const first = json.runs.find((run) => run.key === 'l-1');
    expect(first?.queue).toMatchObject({ queue: 'read-line', position: 1 });
    expect(Number.isNaN(Date.parse(first!.queue!.enqueuedAt))).toBe(false);
    const text = await cli(['runs', '--status', 'waiting']);
    expect(text.stdout).toMatch(/l-4 .*slot of queue 'read-line', #5 of 5, priority -1/);

    const inspected = await cli(['inspect', 'l-0', '--scope', 's']);
    expect(inspected.stdout).toMatch(/queue\s+'read-line' · priority 0 · #3 of 5 waiting in the queue/);
    const inspectedJson = await cli(['inspect', 'l-0', '--scope', 's', '--json']);
    expect(inspectedJson.json<{ matches: { queue: { position: number } }[] }>().matches[0]?.queue).toMatchObject({ position: 3 });
    const holderText = await cli(['inspect', 'l-holder', '--scope', 's']);
    expect(holderText.stdout).toMatch(/queue\s+'read-line' · priority 0 · holds a slot/);

    // Let each holder go: the next to start is the one at position 1, every time.
    let current = 'l-holder';
    for (const key of expectedOrder) {
      const next = nextStart();
      gates.get(current)!();
      current = await next;
      expect(current).toBe(key);
      const info = await engine.get({ scope: 's', key });
      expect(info?.queue).toMatchObject({ holding: true, position: null });
    }
    gates.get(current)!();
    await expect.poll(async () => (await engine!.get({ scope: 's', key: current }))?.status).toBe('completed');
    expect((await engine.get({ scope: 's', key: current }))?.queue).toBeUndefined();
  });

  it("counts a partition's line apart from the others", async () => {
    engine ??= testEngine(db(), [hold], { queues: [line, tenants] });
    for (let i = 0; i < 3; i += 1) await engine.enqueue(hold, { scope: 't', key: `a-${i}` }, { tenant: 'a', n: i }, { queue: tenants });
    for (let i = 0; i < 2; i += 1) await engine.enqueue(hold, { scope: 't', key: `b-${i}` }, { tenant: 'b', n: i }, { queue: tenants });
    // a-0 and b-0 hold the two slots; a-1, a-2 and b-1 wait, each in its partition's line.
    await expect.poll(async () => (await engine!.get({ scope: 't', key: 'b-0' }))?.queue?.holding).toBe(true);
    const place = async (key: string) => (await engine!.get({ scope: 't', key }))?.queue;
    expect(await place('a-2')).toMatchObject({ partition: 'a', position: 2, partitionWaiting: 2, queueWaiting: 3 });
    expect(await place('b-1')).toMatchObject({ partition: 'b', position: 1, partitionWaiting: 1, queueWaiting: 3 });
    const text = await cli(['inspect', 'a-2', '--scope', 't']);
    expect(text.stdout).toMatch(/queue\s+'read-tenants' partition 'a' · priority 0 · #2 of 2 waiting in its partition \(3 in the queue\)/);
  });
});
