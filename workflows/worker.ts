/**
 * The shop's worker process: confirmation emails, crash recovery of checkouts, purging, and its /metrics.
 * It exits 1 if the worker cannot go on (docs/effects.md).
 */
import { connect, runWorker } from 'stepkey';
import { collectDatabaseMetrics, serveMetrics } from 'stepkey/metrics';
import { checkout } from './checkout.js';
import { databaseUrl } from './config.js';
import { sendConfirmation } from './effects.js';
import { onStop } from './lib/service.js';

const database = connect(databaseUrl(), { max: 20, applicationName: 'shop-worker' });
const worker = await runWorker({ database, workflows: [checkout], effects: [sendConfirmation], concurrency: 10 });
// Prometheus metrics of this worker (runs, steps, sweeps) and of the database (open runs, the outbox).
collectDatabaseMetrics(database);
const metrics = await serveMetrics({ port: Number(process.env.WORKER_METRICS_PORT ?? 0) });
console.log(`READY worker pool ${worker.poolId}, metrics at ${metrics.url}`);
// A runner that graphile-worker stops (a Postgres restart) is replaced inside the worker; `closed`
// rejects only when none can go on. Then this process exits 1, and its supervisor starts another.
worker.closed.catch(async (error: unknown) => {
  console.error(`worker stopped: ${error instanceof Error ? error.message : String(error)}`);
  await metrics.close().catch(() => {});
  await database.close().catch(() => {});
  process.exit(1);
});

onStop(async () => {
  await metrics.close();
  await worker.stop();
  await database.close();
});
