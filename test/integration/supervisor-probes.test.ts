/**
 * The worker's health probe under `npm start`: healthy while a pool of the
 * worker's process beats, unhealthy once it stopped (or beats no more),
 * unknown when the database cannot be read (an outage is not the worker's
 * fault, and the worker rides it out by itself).
 */
import { hostname } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { runWorker } from '../../src/worker/run-worker.js';
import { heartbeatProbe } from '../../workflows/supervisor/probes.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const probes: { close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const probe of probes) await probe.close();
});

describe('the worker heartbeat probe', () => {
  it('is healthy while the process’s pool beats and unhealthy once it stopped', async () => {
    // Fresh within minutes: however busy the host, the pool's beats count; its stop is what must show.
    const probe = heartbeatProbe(db().url, PATIENCE_MS);
    probes.push(probe);
    expect(await probe.probe(process.pid)).toBe('unhealthy');
    const worker = await runWorker({ database: db(), concurrency: 1, leaseMs: 1_500, purgeSchedule: false, logger: false, onError: () => {} });
    try {
      expect(await probe.probe(process.pid)).toBe('healthy');
      expect(await probe.probe(process.pid + 1_000_000)).toBe('unhealthy');
    } finally {
      await worker.stop();
    }
    expect(await probe.probe(process.pid)).toBe('unhealthy');
  });

  it('is unhealthy when the beats have gone stale, and unknown when the database cannot be read', async () => {
    const probe = heartbeatProbe(db().url, PATIENCE_MS);
    probes.push(probe);
    await db().sql`
      insert into stepkey.worker_pools (pool_id, hostname, pid, started_at, last_beat_at)
      values ('pool-stale', ${hostname()}, 4242424, now() - interval '2 hours', now() - interval '1 hour')`;
    expect(await probe.probe(4242424)).toBe('unhealthy');
    const unreachable = heartbeatProbe('postgres://postgres@127.0.0.1:1/none');
    probes.push(unreachable);
    expect(await unreachable.probe(process.pid)).toBe('unknown');
  });
});
