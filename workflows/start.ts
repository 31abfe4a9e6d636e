/**
 * `npm start`: the example shop, on one command.
 *
 * Without DATABASE_URL it starts an embedded PostgreSQL (data in
 * .stepkey/app, kept across runs) owned by this supervisor. It migrates once,
 * seeds stock, then starts the payment stand-in, a worker and the order API
 * — each supervised (supervisor/supervise.ts): restarted whenever it dies or
 * stops working (the API's /health, the worker's pool heartbeat failing for
 * about 10 s), with backoff from 0.5 s to 30 s and no limit — and prints a
 * curl to try. Ctrl-C stops them in
 * order — API, worker (draining its jobs), payment service, PostgreSQL — and
 * exits 0. Each process runs in a group of its own, so the terminal's Ctrl-C
 * reaches only this supervisor; each also exits if the supervisor dies.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { connect, startEmbeddedPostgres, type EmbeddedPostgres } from 'stepkey';
import { migrateExample } from './db/migrate.js';
import { seed } from './seed.js';
import { startService, type ServiceProcess } from './supervisor/service-process.js';
import { heartbeatProbe, httpProbe, type HeartbeatProbe } from './supervisor/probes.js';
import { supervise, type Supervised } from './supervisor/supervise.js';
import { dataDir, projectRoot } from './supervisor/paths.js';
import { clearState, writeState } from './supervisor/state-file.js';

const log = (message: string) => console.log(`stepkey: ${message}`);
const dir = dataDir();
mkdirSync(dir, { recursive: true });

let embedded: EmbeddedPostgres | undefined;
let api: Supervised | undefined;
let worker: Supervised | undefined;
let payments: Supervised | undefined;
let dashboard: ServiceProcess | undefined;
let beats: HeartbeatProbe | undefined;
let stopping = false;
let stopSignalAt = 0;

async function ensureDatabase(adminUrl: string, name: string): Promise<string> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const rows = await admin`select 1 from pg_database where datname = ${name}`;
    if (rows.length === 0) await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function main(): Promise<void> {
  let databaseUrl = process.env.DATABASE_URL;
  if (databaseUrl) {
    log('using the database in DATABASE_URL');
  } else {
    log(`starting PostgreSQL (embedded, data in ${join(dir, 'postgres')})`);
    embedded = await startEmbeddedPostgres({ dir: join(dir, 'postgres') });
    databaseUrl = await ensureDatabase(embedded.url, 'shop');
  }
  log('migrating');
  await migrateExample(databaseUrl);
  const database = connect(databaseUrl, { max: 2 });
  await seed(database);
  await database.close();

  const env = { DATABASE_URL: databaseUrl };
  const supervision = { log };
  payments = supervise(
    {
      name: 'payments',
      start: () => startService('payments', 'workflows/payments/main.ts', { cwd: projectRoot, env: { ...env, PAYMENTS_PORT: process.env.PAYMENTS_PORT ?? '3001' }, ready: /LISTENING (\S+)/ }),
    },
    { ...supervision, onStarted: () => recordState() },
  );
  const paymentsUrl = (await payments.first).match[1]!;
  const serviceEnv = { ...env, PAYMENTS_URL: paymentsUrl };

  beats = heartbeatProbe(databaseUrl);
  const heartbeat = beats;
  worker = supervise(
    {
      name: 'worker',
      start: () => startService('worker', 'workflows/worker.ts', { cwd: projectRoot, env: serviceEnv, ready: /READY/ }),
      // Stops working: its pool heartbeat (stepkey.worker_pools) goes stale while the database answers.
      probe: ({ service }) => heartbeat.probe(service.pid),
    },
    { ...supervision, onStarted: () => recordState() },
  );
  await worker.first;

  // The dashboard starts alongside the API (it may build its browser app first); without it the shop still runs.
  const dashboardStarting = startService('dashboard', 'workflows/dashboard.ts', { cwd: projectRoot, env: { ...env, DASHBOARD_PORT: process.env.DASHBOARD_PORT ?? '4000' }, ready: /LISTENING (\S+) token=(\S+)/ })
    .catch((error: unknown) => void log(`the dashboard did not start (${error instanceof Error ? error.message : String(error)}); is DASHBOARD_PORT free?`));
  api = supervise(
    {
      name: 'api',
      start: () => startService('api', 'workflows/api/main.ts', { cwd: projectRoot, env: { ...serviceEnv, PORT: process.env.PORT ?? '3000' }, ready: /LISTENING (\S+)/ }),
      // Stops working: GET /health does not answer 200 within 2 s.
      probe: ({ match }) => httpProbe(new URL('/health', match[1]!).toString()),
    },
    { ...supervision, onStarted: () => recordState() },
  );
  const apiUrl = (await api.first).match[1]!;
  const dashboardStarted = await dashboardStarting;
  dashboard = dashboardStarted?.service;

  function recordState(): void {
    const running = { api: api?.current(), worker: worker?.current(), payments: payments?.current() };
    if (!running.api || !running.payments || !running.worker) return;
    writeState(dir, {
      supervisor: process.pid,
      api: running.api.service.pid,
      worker: running.worker.service.pid,
      payments: running.payments.service.pid,
      postgres: embedded?.pid ?? null,
      apiUrl: running.api.match[1]!,
      paymentsUrl: running.payments.match[1]!,
      databaseUrl: databaseUrl!,
    });
  }
  recordState();

  const key = `order-${Date.now().toString(36)}`;
  console.log(`
  The shop is running.

    API       ${apiUrl}
    payments  ${paymentsUrl}
${dashboardStarted ? `    dashboard ${dashboardStarted.match[1]!}   (actions: sign in with ${dashboardStarted.match[2]!})\n` : ''}
  Create an order (run it twice: one order, the second answer is a replay):

    curl -i -X POST ${apiUrl}/orders.create \\
      -H 'Authorization: Bearer acme' \\
      -H 'Content-Type: application/json' \\
      -H 'Idempotency-Key: "${key}"' \\
      -d '{"sku":"sku-espresso","quantity":1,"email":"ada@example.com"}'

  Look inside, in another terminal:

    export DATABASE_URL='${databaseUrl}'
    npm run stepkey -- inspect ${key} --scope acme   # the run, its steps, the charge, the email job
    npm run stepkey -- runs
    npm run demo

  Ctrl-C stops everything (from a script: kill -INT ${process.pid}).
`);
}

async function stop(signal: string): Promise<void> {
  if (stopping) {
    // One Ctrl-C under npm arrives twice: from the terminal and forwarded by npm.
    if (Date.now() - stopSignalAt < 2_000) return;
    log(`${signal} again: killing everything now`);
    for (const service of [api, dashboard, worker, payments]) service?.kill();
    await embedded?.stop();
    process.exit(130);
  }
  stopping = true;
  stopSignalAt = Date.now();
  log(`${signal}: stopping the API`);
  await api?.stop(10_000);
  await dashboard?.stop(5_000);
  log('stopping the worker (finishing its jobs)');
  await worker?.stop(35_000);
  log('stopping the payment service');
  await payments?.stop(10_000);
  await beats?.close().catch(() => {});
  if (embedded) {
    log('stopping PostgreSQL');
    await embedded.stop();
  }
  clearState(dir);
  log('stopped');
  process.exit(0);
}

process.on('SIGINT', () => void stop('SIGINT'));
process.on('SIGTERM', () => void stop('SIGTERM'));

main().catch(async (error: unknown) => {
  console.error(`stepkey: could not start: ${error instanceof Error ? error.message : String(error)}`);
  stopping = true;
  for (const service of [api, dashboard, worker, payments]) await service?.stop(5_000);
  await embedded?.stop();
  process.exit(1);
});
