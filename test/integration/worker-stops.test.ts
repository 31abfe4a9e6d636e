/**
 * How a worker ends: when graphile-worker stops by itself the worker says so
 * and stops (the CLI exits 1) instead of idling; a start that fails after the
 * runner started leaves no runner behind; stop() aborts jobs after
 * shutdownTimeoutMs, not after graphile-worker's own 5 s.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { spawnScript } from '../../src/testing/child-process.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { appModule } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();

/** What graphile-worker does on a breaking migration by another process: its pool shuts down. */
const announceBreakingMigration = () => db().sql`select pg_notify('worker:migrate', '{"breaking":true}')`;
/** graphile-worker's LISTEN connections open on the test database. */
const listeners = async () =>
  (await db().sql`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and query like 'LISTEN "jobs:insert"%'`)[0]!.n as number;

const exitCode = process.exitCode;
afterEach(() => {
  // graphile-worker sets process.exitCode = 57 on a breaking migration.
  process.exitCode = exitCode;
});

describe('a worker whose graphile-worker stops by itself', () => {
  it('reports it through onError, stops, and rejects `closed`', async () => {
    const errors: string[] = [];
    const worker = await runWorker({
      database: db(),
      concurrency: 1,
      leaseMs: 2_000,
      purgeSchedule: false,
      onError: (error, context) => errors.push(`${context}: ${(error as Error).message}`),
    });
    await expect.poll(listeners).toBe(1);
    await announceBreakingMigration();
    await expect(worker.closed).rejects.toMatchObject({ message: expect.stringMatching(/stopped by itself/) });
    expect(errors).toContainEqual(expect.stringMatching(/^graphile-worker: graphile-worker's pool pool-\w+ stopped by itself/));
    // Not marked stopped: the other workers unlock whatever it may have left locked.
    const [pool] = await db().sql`select stopped_at is null as unmarked from stepkey.worker_pools where pool_id = ${worker.poolId}`;
    expect(pool!.unmarked).toBe(true);
    await worker.stop();
  });

  it('makes `stepkey worker` exit 1 instead of running on without consuming', async () => {
    const child = spawnScript('src/cli/main.ts', {
      args: ['worker', '--app', appModule('cli-app'), '--database', db().url, '--concurrency', '1'],
      env: { STEPKEY_LEASE_MS: '2000', DATABASE_URL: undefined },
    });
    try {
      await child.waitFor(/stepkey worker pool \S+ running/, PATIENCE_MS);
      await expect.poll(listeners).toBe(1);
      await announceBreakingMigration();
      const exited = await Promise.race([child.exited, sleep(PATIENCE_MS).then(() => 'still running')]);
      expect(exited, child.output()).toEqual({ code: 1, signal: null });
      expect(child.output()).toMatch(/stopped by itself/);
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('a start that fails after graphile-worker started', () => {
  it('stops the runner it started: a job it could run stays untouched', async () => {
    await db().sql`alter table stepkey.worker_pools rename to worker_pools_away`;
    let jobId: string | undefined;
    try {
      await expect(runWorker({ database: db(), concurrency: 1, purgeSchedule: false, onError: () => {} })).rejects.toThrow(
        /worker_pools/,
      );
      // A runner left running would take this job at once (add_job notifies it).
      [{ id: jobId }] = await db().sql<[{ id: string }]>`select id::text from graphile_worker.add_job('stepkey:purge')`;
      await sleep(1_000);
      const [job] = await db().sql`select attempts, locked_by from graphile_worker.jobs where id = ${jobId}::bigint`;
      expect(job).toEqual({ attempts: 0, locked_by: null });
      expect(await listeners()).toBe(0);
    } finally {
      await db().sql`alter table stepkey.worker_pools_away rename to worker_pools`;
      if (jobId) await db().sql`select graphile_worker.complete_jobs(array[${jobId}::bigint])`;
    }
  });
});

describe('stop()', () => {
  it('aborts the jobs still running after shutdownTimeoutMs', async () => {
    // Two workers stopped together, each with a job that runs until it is aborted: the one whose
    // shutdownTimeoutMs is 300 ms aborts its job while the other's, stopped first and given ten
    // minutes, is not aborted yet — so the abort comes from shutdownTimeoutMs, not from
    // graphile-worker's own 5 s (which would have aborted the one stopped first first).
    const signals = new Map<string, AbortSignal>();
    const finishGiven = new Map<string, () => void>();
    const held = (name: string) =>
      defineEffect({
        name,
        payload: z.object({}),
        async handler(_payload, { signal }) {
          signals.set(name, signal);
          await new Promise<void>((resolve) => {
            signal.addEventListener('abort', () => resolve());
            finishGiven.set(name, resolve);
          });
        },
      });
    const quick = held('test.held-quick');
    const slow = held('test.held-slow');
    const start = (effect: typeof quick, shutdownTimeoutMs: number) =>
      runWorker({ database: db(), effects: [effect], concurrency: 1, shutdownTimeoutMs, leaseMs: LONG_LEASE_MS, purgeSchedule: false, onError: () => {} });
    const patientWorker = await start(slow, 600_000);
    const quickWorker = await start(quick, 300);
    await enqueueEffect(db().sql, slow, {}, { scope: 'acme', key: uniqueKey('held-slow') });
    await enqueueEffect(db().sql, quick, {}, { scope: 'acme', key: uniqueKey('held-quick') });
    await expect.poll(() => signals.size).toBe(2);
    const patientStopped = patientWorker.stop();
    await quickWorker.stop();
    expect(signals.get('test.held-quick')!.aborted).toBe(true);
    expect(signals.get('test.held-slow')!.aborted).toBe(false);
    finishGiven.get('test.held-slow')!();
    await patientStopped;
    expect(signals.get('test.held-slow')!.aborted).toBe(false);
  });
});
