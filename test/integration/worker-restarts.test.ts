/**
 * A worker whose database goes away while a job completes: graphile-worker
 * cannot record the job's result and stops its pool. The worker replaces the
 * runner once the database is back — a new pool id — and goes on: jobs
 * enqueued after the outage are delivered, the jobs the old pool left locked
 * are unlocked (it stopped beating) and run again, nothing stays locked, and
 * `closed` never settles.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { proxy, type TcpProxy } from '../helpers/tcp-proxy.js';

const db = useTestDatabase();

let relay: TcpProxy;
beforeAll(async () => {
  await db().sql`create table outage_mail (n int not null, message_key text primary key)`;
  relay = proxy(new URL(db().url));
  await relay.up();
});
afterAll(async () => {
  await relay.down().catch(() => {});
});

/** The first delivery of message 0 waits here until the test opens it. */
let releaseFirst!: () => void;
const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
let firstReached!: () => void;
const firstArrived = new Promise<void>((resolve) => (firstReached = resolve));

const mail = defineEffect({
  name: 'test.outage-mail',
  payload: z.object({ n: z.number().int() }),
  async handler({ n }, { sql, key, attempt }) {
    if (n === 0 && attempt === 1) {
      firstReached();
      await firstHeld;
    }
    await sql`insert into outage_mail (n, message_key) values (${n}, ${key})`;
  },
});

const enqueue = async (from: number, count: number) => {
  for (let n = from; n < from + count; n += 1) await enqueueEffect(db().sql, mail, { n }, { scope: 'acme', key: uniqueKey(`mail-${n}`) });
};
const delivered = async () => (await db().sql<{ n: number }[]>`select n from outage_mail order by n`).map((row) => row.n);
const lockedBy = async (pool: string) =>
  (await db().sql<[{ n: number }]>`select count(*)::int as n from graphile_worker.jobs where locked_by = ${pool}`)[0].n;

describe('a worker whose database goes away while a job completes', () => {
  let worker: Worker | undefined;
  afterAll(async () => {
    await worker?.stop();
  });

  it('starts a new runner once the database is back, and every job is delivered once', async () => {
    const errors: string[] = [];
    // Through the relay: graphile-worker, the heartbeat and the inbox all lose the database together.
    worker = await runWorker({
      database: relay.url,
      effects: [mail],
      concurrency: 1,
      leaseMs: 1_500,
      purgeSchedule: false,
      restartBackoff: { initialDelayMs: 100, maxDelayMs: 500 },
      logger: false,
      onError: (error, context) => errors.push(`${context}: ${(error as Error).message}`),
    });
    let closed: string | undefined;
    worker.closed.then(
      () => (closed = 'resolved'),
      (error: unknown) => (closed = `rejected: ${(error as Error).message}`),
    );
    const oldPool = worker.poolId;

    await enqueue(0, 10);
    await firstArrived;
    // The local queue holds the rest of the batch, locked under the pool's id.
    expect(await lockedBy(oldPool)).toBeGreaterThan(1);

    await relay.down();
    releaseFirst(); // its inbox commit fails, and so does recording the job's failure: the pool stops
    await expect.poll(() => errors.some((line) => /stopped by itself/.test(line))).toBe(true);
    await sleep(1_000); // replacements fail meanwhile: the database is still down
    expect(await lockedBy(oldPool)).toBeGreaterThan(0);

    await relay.up();
    await enqueue(10, 5);
    await expect.poll(delivered, { interval: 200 }).toEqual([...Array(15).keys()]);
    expect(worker.restarts).toBeGreaterThanOrEqual(1);
    expect(worker.poolId).not.toBe(oldPool);
    // The old pool was declared dead and unlocked, not marked stopped by a drain.
    const [old] = await db().sql`select unlocked_at is not null as unlocked from stepkey.worker_pools where pool_id = ${oldPool}`;
    expect(old).toEqual({ unlocked: true });
    await expect.poll(async () => (await db().sql`select id from graphile_worker.jobs`).length).toBe(0);
    expect(closed).toBeUndefined();
  });
});
