/**
 * A real stepkey for the browser test: PostgreSQL (DATABASE_URL, or an
 * embedded one in .stepkey/pg-browser), migrated; the shop's engine and a
 * worker (graphile-worker, the sweeper) in this process; and
 * `stepkey dashboard` in a child process of its own, with an access token.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import postgres from 'postgres';
import { connect, type Database } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/embedded/start-embedded.js';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { createEngine, type Engine } from '../../src/engine/engine.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { withDatabase } from '../helpers/urls.js';
import { effects, queues, shopTables, useShopDatabase, workflows } from './shop.js';

export interface BrowserApp {
  databaseUrl: string;
  database: Database;
  engine: Engine;
  worker: Worker | undefined;
  dashboardUrl: string;
  token: string;
  setSwitch(name: string, on: boolean): Promise<void>;
  startWorker(): Promise<void>;
  stopWorker(): Promise<void>;
  stop(): Promise<void>;
}

export async function startBrowserApp(root: string): Promise<BrowserApp> {
  let embedded: EmbeddedPostgres | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await startEmbeddedPostgres({ dir: join(root, '.stepkey', 'pg-browser') });
    adminUrl = embedded.url;
  }
  const name = `stepkey_browser_${randomBytes(3).toString('hex')}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const databaseUrl = withDatabase(adminUrl, name);
  await migrate(databaseUrl);
  const database = connect(databaseUrl, { max: 20, applicationName: 'browser-test app' });
  await database.sql.unsafe(shopTables);
  useShopDatabase(database.sql);
  const engine = createEngine({ database, workflows, queues, leaseMs: 3_000, sweepIntervalMs: 250, onError: () => {} });
  let worker: Worker | undefined;
  const startWorker = async () => {
    worker = await runWorker({ database, engine, effects, concurrency: 4, purgeSchedule: false, onError: () => {} });
  };
  await startWorker();

  const token = randomBytes(18).toString('base64url');
  const dashboard: ChildHandle = spawnScript(join(root, 'src', 'cli', 'main.ts'), {
    args: ['dashboard', '--port', '0', '--database', databaseUrl, '--app', join(root, 'test', 'browser', 'shop.ts')],
    env: { STEPKEY_DASHBOARD_TOKEN: token },
    cwd: root,
  });
  const dashboardUrl = (await dashboard.waitFor(/stepkey dashboard on (http:\/\/\S+)/, PATIENCE_MS))[1]!;

  return {
    databaseUrl,
    database,
    engine,
    get worker() {
      return worker;
    },
    dashboardUrl,
    token,
    async setSwitch(switchName, on) {
      await database.sql`insert into browser_switch values (${switchName}, ${on}) on conflict (name) do update set enabled = excluded.enabled`;
    },
    startWorker,
    async stopWorker() {
      await worker?.stop();
      worker = undefined;
    },
    async stop() {
      dashboard.kill('SIGTERM');
      await Promise.race([dashboard.exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      dashboard.kill('SIGKILL');
      await worker?.stop().catch(() => {});
      await engine.shutdown({ timeoutMs: 2_000 }).catch(() => {});
      await database.close().catch(() => {});
      const dropper = postgres(adminUrl!, { max: 1, onnotice: () => {} });
      await dropper.unsafe(`drop database if exists ${name} with (force)`).catch(() => {});
      await dropper.end();
      await embedded?.stop();
    },
  };
}
