/**
 * `stepkey queues`: per queue and partition, the runs waiting for a slot (a
 * queue no run was put on yet, listed empty),
 * the slots held, and the starts counted over the sample.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase } from '../helpers/database.js';
import { connect } from '../../src/db/connect.js';
import { testEngine } from '../helpers/engine.js';

let release!: () => void;
const held = new Promise<void>((resolve) => (release = resolve));
const hold = defineWorkflow({
  name: 'flow-cli-hold',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { hold: step('hold.v1') },
  async run({ steps }) {
    await steps.hold.call(() => held);
  },
});
const payments = defineLimit<{ tenant: string }>({
  name: 'cli-payments',
  rateLimit: { limit: 100, periodMs: 1_000 },
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 1 },
});
const limited = defineWorkflow({
  name: 'flow-cli-limited',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { charge: step('charge.v1', { limit: payments }) },
  async run({ steps }) {
    await steps.charge.call(() => held);
  },
});
const queue = defineQueue<{ tenant: string }>({ name: 'cli-queue', concurrency: 2, partitionBy: (input) => input.tenant, perPartition: { concurrency: 1 } });
/** Registered, never enqueued on: listed all the same. */
const idle = defineQueue({ name: 'cli-idle', concurrency: 3 });

describe('stepkey queues', () => {
  let cleanup: (() => Promise<void>) | undefined;
  afterAll(async () => {
    release();
    await cleanup?.();
  });

  it('shows depth, running and the limit per queue and partition', async () => {
    const created = await createTestDatabase();
    const db = Object.assign(connect(created.url, { max: 4 }), { name: 'cli' });
    const engine = testEngine(db, [hold, limited], { queues: [queue, idle], limits: [payments] });
    cleanup = async () => {
      await engine.shutdown({ timeoutMs: 5_000 });
      await db.close();
      await created.drop();
    };
    for (let i = 0; i < 5; i += 1) await engine.enqueue(hold, { scope: 's', key: `a-${i}` }, { tenant: 'a' }, { queue });
    await engine.enqueue(hold, { scope: 's', key: 'b-0' }, { tenant: 'b' }, { queue });
    const result = await runCli(['queues', '--json', '--sample-ms', '50'], { databaseUrl: created.url });
    expect(result.code).toBe(0);
    const rows = result.json<{ queues: { queue: string; partition: string; waiting: number; running: number; concurrency: number }[] }>().queues;
    expect(rows.map(({ queue: q, partition, waiting, running, concurrency }) => ({ q, partition, waiting, running, concurrency }))).toEqual([
      { q: 'cli-idle', partition: '', waiting: 0, running: 0, concurrency: 3 },
      { q: 'cli-queue', partition: 'a', waiting: 4, running: 1, concurrency: 2 },
      { q: 'cli-queue', partition: 'b', waiting: 0, running: 1, concurrency: 2 },
    ]);
    const text = await runCli(['queues', '--sample-ms', '50'], { databaseUrl: created.url });
    expect(text.stdout).toMatch(/cli-queue\s+a\s+4\s+1\s+2 \(1 each\)/);

    // Step limits: per partition, waiting and held; a run parked on one shows it in inspect.
    for (let i = 0; i < 3; i += 1) await engine.start(limited, { scope: 's', key: `l-${i}` }, { tenant: 'acct' });
    const row = async (key: string) =>
      (await db.sql<{ status: string; wait_kind: string | null }[]>`select status, wait_kind from stepkey.ledger where scope = 's' and key = ${key}`)[0];
    await expect.poll(async () => (await Promise.all(['l-0', 'l-1', 'l-2'].map(row))).filter((r) => r?.status === 'waiting').length).toBe(2);
    const listed = await runCli(['queues', '--json', '--sample-ms', '50', '--limit', 'cli-payments'], { databaseUrl: created.url });
    expect(listed.json<{ limits: unknown[] }>().limits).toMatchObject([
      { limit: 'cli-payments', partition: 'acct', concurrency: 1, rateLimit: '100/1000ms', held: 1, waiting: 2 },
    ]);
    const table = await runCli(['queues', '--sample-ms', '50'], { databaseUrl: created.url });
    expect(table.stdout).toMatch(/cli-payments\s+acct\s+2\s+1\s+1 at once, 100\/1000ms/);
    const waiting = (await Promise.all(['l-0', 'l-1', 'l-2'].map(async (key) => ({ key, r: await row(key) })))).find((x) => x.r?.status === 'waiting')!;
    const inspected = await runCli(['inspect', waiting.key, '--scope', 's'], { databaseUrl: created.url });
    expect(inspected.stdout).toMatch(/waits for\s+step limit 'cli-payments\[acct\]' at step 'charge.v1'/);
    const runs = await runCli(['runs', '--status', 'waiting'], { databaseUrl: created.url });
    expect(runs.stdout).toMatch(/step limit 'cli-payments\[acct\]' at charge.v1/);
  });
});
