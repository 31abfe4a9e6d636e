/**
 * Outbox: the enqueue rate on its own (each enqueue is a transaction that
 * NOTIFYs, and Postgres serialises the commits of those), and effects/s
 * through one worker on a backlog enqueued beforehand.
 */
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { benchDatabase, measure, printTable } from './harness.js';

const received = defineEffect({
  name: 'bench.received',
  payload: z.object({ n: z.number() }),
  async handler(payload, { sql, key }) {
    await sql`insert into bench_received (message_key, n) values (${key}, ${payload.n})`;
  },
});

export async function outboxBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 40 });
  try {
    await db.sql`create table bench_received (message_key text not null, n int not null)`;
    const rows: (string | number)[][] = [];
    const backlog = Math.max(5_000, options.ops);
    let enqueueRate = 0;
    for (const concurrency of [1, 8]) {
      const enqueue = await measure(backlog / 2, concurrency, (i) =>
        enqueueEffect(db.sql, received, { n: i }, { scope: 'bench', key: `e-${concurrency}-${i}` }),
      );
      enqueueRate = Math.max(enqueueRate, enqueue.opsPerSecond);
      rows.push([`enqueue (ledger row + add_job), c=${concurrency}`, enqueue.opsPerSecond, enqueue.p50Ms, enqueue.p99Ms]);
    }
    for (const concurrency of [10, 20]) {
      await db.sql`truncate bench_received`;
      await db.sql`delete from graphile_worker._private_jobs`;
      await db.sql`
        select graphile_worker.add_jobs(array_agg(
          ('bench.received', json_build_object('k', 'bench-' || ${concurrency}::text || '-' || g, 's', 'bench', 'p', json_build_object('n', g)),
           null, null, null, null, null, null)::graphile_worker.job_spec))
          from generate_series(1, ${backlog}) g`;
      const started = performance.now();
      const worker = await runWorker({ database: db, effects: [received], concurrency, localQueueSize: 100, purgeSchedule: false, onError: () => {}, logger: false });
      for (;;) {
        const [row] = await db.sql`select count(*)::int as n from bench_received`;
        if (row!.n >= backlog) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const seconds = (performance.now() - started) / 1000;
      await worker.stop();
      rows.push([`consume a backlog of ${backlog} through one worker, concurrency ${concurrency}`, backlog / seconds, '', '']);
    }
    printTable('Outbox', ['operation', 'effects/s', 'p50 ms', 'p99 ms'], rows);
  } finally {
    await db.close();
    await database.close();
  }
}
