/**
 * A live worker is never declared dead: it keeps beating while it drains its
 * jobs on stop(), and while every connection of its app pool is held by an
 * effect transaction; and its own check for dead pools never takes its jobs. Time is moved with the worker's clock; a beat taken
 * after the move proves the worker still beats, and another worker's check made then finds it alive.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { Clock } from '../../src/db/clock.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { unlockDeadPools } from '../../src/worker/pool-liveness.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const leaseMs = 600;

/** Handlers wait here until the test opens the gate. */
let started = 0;
let open!: () => void;
let gate = Promise.resolve();
function closeGate(): void {
  started = 0;
  gate = new Promise<void>((resolve) => (open = resolve));
}
const held = defineEffect({
  name: 'test.held',
  payload: z.object({ n: z.number() }),
  async handler() {
    started += 1;
    await gate;
  },
});

/**
 * Another worker's check for dead pools, made as soon as the pool has beaten since the clock was
 * moved: the beat seen fresh and the check in one transaction, at one `now()`, so that a busy host's
 * delay between two statements is not counted against the worker as a missed beat.
 */
async function checkOnceBeaten(poolId: string, clock: Clock): Promise<string[]> {
  const deadline = Date.now() + PATIENCE_MS;
  for (;;) {
    const unlocked = await db().sql.begin(async (tx) => {
      const [row] = await tx<{ fresh: boolean }[]>`
        select last_beat_at >= now() + ${clock.offsetMs - leaseMs / 2}::float8 * interval '1 millisecond' as fresh
          from stepkey.worker_pools where pool_id = ${poolId}`;
      return row?.fresh ? unlockDeadPools(tx, clock, leaseMs) : undefined;
    });
    if (unlocked) return unlocked;
    if (Date.now() > deadline) throw new Error(`pool ${poolId} did not beat within ${PATIENCE_MS} ms of the clock's move`);
    await sleep(20);
  }
}

const lockedBy = async (poolId: string) =>
  (await db().sql`select count(*)::int as n from graphile_worker.jobs where locked_by = ${poolId}`)[0]!.n as number;

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  open?.();
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

/** A worker running `held` two at a time on the test clock, stopped after the test. */
async function startWorker(database: Database, clock: Clock): Promise<Worker> {
  const worker = await runWorker({ database, effects: [held], concurrency: 2, clock, leaseMs, purgeSchedule: false, onError: () => {} });
  cleanup.push(() => worker.stop());
  return worker;
}

describe('worker liveness', () => {
  it('beats on while stop() drains a job longer than the lease: its job stays locked by it', async () => {
    closeGate();
    const clock = new Clock();
    const worker = await startWorker(db(), clock);
    await enqueueEffect(db().sql, held, { n: 1 }, { scope: 'acme', key: uniqueKey('drain') });
    await expect.poll(() => started).toBe(1);

    const stopped = worker.stop();
    clock.advance(10 * leaseMs);
    expect(await checkOnceBeaten(worker.poolId, clock)).not.toContain(worker.poolId);
    expect(await lockedBy(worker.poolId)).toBe(1);

    open();
    await stopped;
    const [pool] = await db().sql`select stopped_at is not null as stopped from stepkey.worker_pools where pool_id = ${worker.poolId}`;
    expect(pool!.stopped).toBe(true);
    expect(await lockedBy(worker.poolId)).toBe(0);
  });

  it('beats while every connection of its app pool is held by a running effect', async () => {
    closeGate();
    const clock = new Clock();
    const small: Database = connect(db().url, { max: 2 });
    cleanup.push(() => small.close());
    const worker = await startWorker(small, clock);
    await enqueueEffect(db().sql, held, { n: 1 }, { scope: 'acme', key: uniqueKey('busy-a') });
    await enqueueEffect(db().sql, held, { n: 2 }, { scope: 'acme', key: uniqueKey('busy-b') });
    // Two handlers, each inside its inbox transaction: both connections of the pool are taken.
    await expect.poll(() => started).toBe(2);

    clock.advance(10 * leaseMs);
    expect(await checkOnceBeaten(worker.poolId, clock)).not.toContain(worker.poolId);
    expect(await lockedBy(worker.poolId)).toBe(2);
  });

  it('never unlocks its own jobs, however late its last beat looks; another worker does', async () => {
    closeGate();
    const clock = new Clock();
    const worker = await startWorker(db(), clock);
    await enqueueEffect(db().sql, held, { n: 1 }, { scope: 'acme', key: uniqueKey('own') });
    await expect.poll(() => started).toBe(1);
    // As if the worker stalled between its beat and its check for dead pools (in one transaction,
    // so that none of its beats comes in between).
    const checkAsIfStale = (self: string) =>
      db().sql.begin(async (tx) => {
        await tx`update stepkey.worker_pools set last_beat_at = now() - interval '1 hour' where pool_id = ${worker.poolId}`;
        return unlockDeadPools(tx, new Clock(), leaseMs, self);
      });
    expect(await checkAsIfStale(worker.poolId)).not.toContain(worker.poolId);
    expect(await lockedBy(worker.poolId)).toBe(1);
    expect(await checkAsIfStale('another-pool')).toContain(worker.poolId);
    expect(await lockedBy(worker.poolId)).toBe(0);
  });
});
