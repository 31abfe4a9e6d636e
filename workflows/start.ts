/**
 * `npm start`: the example shop, on one command.
 *
 * Without DATABASE_URL it starts an embedded PostgreSQL (data in
 * .stepkey/app, kept across runs) owned by this supervisor. It migrates once,
 * seeds stock, then starts the payment stand-in, a worker (restarted if it
 * dies) and the order API, and prints a curl to try. Ctrl-C stops them in
 * order — API, worker (draining its jobs), payment service, PostgreSQL — and
 * exits 0. Each process runs in a group of its own, so the terminal's Ctrl-C
 * reaches only this supervisor; each also exits if the supervisor dies.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { connect } from '../src/db/connect.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/embedded/start-embedded.js';
import { migrateExample } from './db/migrate.js';
import { seed } from './seed.js';
import { startService, type ServiceProcess } from './supervisor/service-process.js';
import { dataDir, projectRoot } from './supervisor/paths.js';
import { clearState, writeState } from './supervisor/state-file.js';

const log = (message: string) => console.log(`stepkey: ${message}`);
const dir = dataDir();
mkdirSync(dir, { recursive: true });

let embedded: EmbeddedPostgres | undefined;
let api: ServiceProcess | undefined;
let worker: ServiceProcess | undefined;
let payments: ServiceProcess | undefined;
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
  const started = await startService('payments', 'workflows/payments/main.ts', {
    cwd: projectRoot,
    env: { ...env, PAYMENTS_PORT: process.env.PAYMENTS_PORT ?? '3001' },
    ready: /LISTENING (\S+)/,
  });
  payments = started.service;
  const paymentsUrl = started.match[1]!;
  const serviceEnv = { ...env, PAYMENTS_URL: paymentsUrl };

  const startWorker = async (): Promise<void> => {
    const { service } = await startService('worker', 'workflows/worker.ts', { cwd: projectRoot, env: serviceEnv, ready: /READY/ });
    worker = service;
    recordState();
    void service.exited.then(({ code, signal }) => {
      if (stopping || worker !== service) return;
      log(`worker exited (${signal ?? `code ${code}`}); starting another`);
      setTimeout(() => {
        if (!stopping) startWorker().catch((error: unknown) => log(`could not restart the worker: ${String(error)}`));
      }, 500);
    });
  };
  await startWorker();

  const apiStarted = await startService('api', 'workflows/api/main.ts', {
    cwd: projectRoot,
    env: { ...serviceEnv, PORT: process.env.PORT ?? '3000' },
    ready: /LISTENING (\S+)/,
  });
  api = apiStarted.service;
  const apiUrl = apiStarted.match[1]!;

  function recordState(): void {
    if (!api || !payments || !worker) return;
    writeState(dir, {
      supervisor: process.pid,
      api: api.pid,
      worker: worker.pid,
      payments: payments.pid,
      postgres: embedded?.pid ?? null,
      apiUrl,
      paymentsUrl,
      databaseUrl: databaseUrl!,
    });
  }
  recordState();

  const key = `order-${Date.now().toString(36)}`;
  console.log(`
  The shop is running.

    API       ${apiUrl}
    payments  ${paymentsUrl}

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
    for (const service of [api, worker, payments]) service?.kill();
    await embedded?.stop();
    process.exit(130);
  }
  stopping = true;
  stopSignalAt = Date.now();
  log(`${signal}: stopping the API`);
  await api?.stop(10_000);
  log('stopping the worker (finishing its jobs)');
  await worker?.stop(35_000);
  log('stopping the payment service');
  await payments?.stop(10_000);
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
  for (const service of [api, worker, payments]) await service?.stop(5_000);
  await embedded?.stop();
  process.exit(1);
});
