/**
 * The example shop, started the way `npm start` starts it (the same entry
 * points: workflows/payments/main.ts, workflows/worker.ts,
 * workflows/api/main.ts) but by the suite itself, with no supervisor: a
 * service that dies stays dead, and the suite reports it. The database is
 * migrated and stocked first, with a SKU that does not run out under load.
 */
import { join } from 'node:path';
import postgres from 'postgres';
import { connect } from '../../src/db/connect.js';
import { migrateExample } from '../../workflows/db/migrate.js';
import { seed } from '../../workflows/seed.js';
import { startChild, type Child } from './child.js';

export const chaosSku = 'sku-chaos';

export interface ChaosApp {
  readonly databaseUrl: string;
  readonly apiUrl: string;
  readonly paymentsUrl: string;
  /** In the order they are stopped: API, worker, payments. */
  readonly services: Child[];
}

async function createDatabase(adminUrl: string, name: string): Promise<string> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function startApp(adminUrl: string, dir: string, projectRoot: string, began: number): Promise<ChaosApp> {
  const databaseUrl = await createDatabase(adminUrl, 'shop');
  await migrateExample(databaseUrl);
  const database = connect(databaseUrl, { max: 2 });
  try {
    await seed(database);
    await database.sql`
      insert into shop.stock (sku, available, price_cents) values (${chaosSku}, 100000000, 120)
      on conflict (sku) do nothing`;
  } finally {
    await database.close();
  }

  const services: Child[] = [];
  const start = async (name: string, file: string, env: Record<string, string>, ready: RegExp) => {
    const child = startChild(name, file, {
      cwd: projectRoot,
      env: { DATABASE_URL: databaseUrl, STEPKEY_SUPERVISED: '1', ...env },
      logFile: join(dir, `${name}.log`),
      began,
    });
    services.unshift(child);
    return (await child.line(ready, 60_000))[1] ?? '';
  };
  const paymentsUrl = await start('payments', 'workflows/payments/main.ts', { PAYMENTS_PORT: '0' }, /LISTENING (\S+)/);
  await start('worker', 'workflows/worker.ts', { PAYMENTS_URL: paymentsUrl, WORKER_METRICS_PORT: '0' }, /READY/);
  const apiUrl = await start('api', 'workflows/api/main.ts', { PAYMENTS_URL: paymentsUrl, PORT: '0' }, /LISTENING (\S+)/);
  return { databaseUrl, apiUrl, paymentsUrl, services };
}
