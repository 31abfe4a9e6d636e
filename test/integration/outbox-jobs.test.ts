/**
 * The outbox's jobs as `stepkey jobs` shows and retries them: a running job
 * on its last attempt is running, not failed; a job failed for good by a
 * permanent error gets its full attempts back when retried by hand.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { defineEffect, retryHorizonMs } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { failJobForGood, retryJobs } from '../../src/outbox/sql/jobs.js';
import { listJobs } from '../../src/read/sql/jobs.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase({ max: 20 });

/** What the handler does with each delivery, by event. */
const plans = new Map<string, ('permanent' | 'retryable' | 'ok')[]>();
const deliveries = new Map<string, number>();
const flaky = defineEffect({
  name: 'test.flaky',
  payload: z.object({ event: z.string(), amount: z.number(), currency: z.string() }),
  maxAttempts: 5,
  async handler(payload) {
    const n = deliveries.get(payload.event) ?? 0;
    deliveries.set(payload.event, n + 1);
    const plan = plans.get(payload.event)?.[n] ?? 'ok';
    if (plan === 'permanent') throw new NonRetryableError('receiver answered 400');
    if (plan === 'retryable') throw new Error('receiver answered 503');
  },
});

const jobOf = async (key: string) => (await listJobs(db().sql)).find((job) => job.key === key);

describe('listing', () => {
  it('shows a locked job on its last attempt as running, not failed', async () => {
    const [job] = await db().sql<{ id: string }[]>`
      select id::text from graphile_worker.add_job('test.listing', '{"k":"last","s":"acme","p":{}}'::json, max_attempts => 2)`;
    // graphile-worker counts the attempt when it takes the job: a job on its last attempt, running.
    await db().sql`
      update graphile_worker._private_jobs set attempts = 2, locked_by = 'pool-busy', locked_at = now()
       where id = ${job!.id}::bigint`;
    expect((await listJobs(db().sql)).find((row) => row.id === job!.id)).toMatchObject({ status: 'running', attempts: 2, maxAttempts: 2 });
    expect((await listJobs(db().sql, { status: 'failed' })).some((row) => row.id === job!.id)).toBe(false);

    await db().sql`update graphile_worker._private_jobs set locked_by = null, locked_at = null where id = ${job!.id}::bigint`;
    expect((await listJobs(db().sql)).find((row) => row.id === job!.id)).toMatchObject({ status: 'failed' });
  });
});

describe('retry by hand', () => {
  it('restores the max attempts a permanent failure lowered, and keeps the payload’s text', async () => {
    const ref = { scope: 'acme', key: uniqueKey('sql') };
    const { key } = await enqueueEffect(db().sql, flaky, { event: ref.key, amount: 12, currency: 'EUR' }, ref);
    const [before] = await db().sql<{ id: string; p: string }[]>`
      select id::text, (payload->'p')::text as p from graphile_worker._private_jobs where key = ${key}`;
    // As if taken by a worker and failed for good on its first attempt.
    await db().sql`update graphile_worker._private_jobs set attempts = 1 where id = ${before!.id}::bigint`;
    await failJobForGood(db().sql, before!.id);
    expect(await jobOf(key)).toMatchObject({ status: 'failed', attempts: 1, maxAttempts: 1 });

    expect(await retryJobs(db().sql, [before!.id])).toEqual([before!.id]);
    expect(await jobOf(key)).toMatchObject({ status: 'pending', attempts: 0, maxAttempts: 5 });
    const [after] = await db().sql<{ p: string }[]>`select (payload->'p')::text as p from graphile_worker._private_jobs where key = ${key}`;
    expect(after!.p).toBe(before!.p);
  });

  describe('through a worker', () => {
    let worker: Worker;
    beforeAll(async () => {
      worker = await runWorker({ database: db(), effects: [flaky], concurrency: 2, leaseMs: 2_000, purgeSchedule: false, onError: () => {} });
    });
    afterAll(() => worker.stop());

    it('gives a job failed for good its attempts back: a retryable error after the retry is retried again', async () => {
      const ref = { scope: 'acme', key: uniqueKey('worker') };
      plans.set(ref.key, ['permanent', 'retryable', 'ok']);
      const { key } = await enqueueEffect(db().sql, flaky, { event: ref.key, amount: 12, currency: 'EUR' }, ref);
      await expect
        .poll(() => jobOf(key))
        .toMatchObject({ status: 'failed', attempts: 1, maxAttempts: 1, lastError: expect.stringMatching(/answered 400/) });

      const failed = (await jobOf(key))!;
      expect(await retryJobs(db().sql, [failed.id])).toEqual([failed.id]);
      // The second delivery fails with a retryable error: with one attempt left it would fail for good.
      await expect
        .poll(() => jobOf(key))
        .toMatchObject({ status: 'retrying', attempts: 1, maxAttempts: 5, lastError: expect.stringMatching(/answered 503/) });
      expect(deliveries.get(ref.key)).toBe(2);
    });
  });
});

describe('the default attempts', () => {
  it('spread their retries over about 3.6 hours (the figure in EffectOptions.maxAttempts)', () => {
    expect(retryHorizonMs(10) / 3_600_000).toBeCloseTo(3.56, 2);
  });
});
