/**
 * A database of its own for one test file, cloned from the migrated template.
 *
 *   const db = useTestDatabase();       // in a describe or at file level
 *   db().sql`select 1`                  // inside tests
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, inject } from 'vitest';
import { connect, type Database } from '../../src/db/connect.js';
import { withDatabase } from './urls.js';
import { createCitusDatabase, dropCitusDatabase } from '../citus/database.js';
import { LONG_LEASE_MS } from './patience.js';

export interface TestDatabase extends Database {
  readonly name: string;
}

/**
 * The file runs against a Citus cluster (the Citus stage). A case that
 * cannot run there (docs/many-machines.md: step limits, a probe of a lock
 * waited for on a worker) is marked `it.skipIf(onCitus())` and runs in every
 * other stage.
 */
export const onCitus = (): boolean => (inject('citusWorkers')?.length ?? 0) > 0;

export async function createTestDatabase(): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const adminUrl = inject('adminUrl');
  const name = `stepkey_t_${inject('runId')}_${randomBytes(4).toString('hex')}`;
  const citusWorkers = inject('citusWorkers');
  if (citusWorkers?.length) {
    const nodes = { coordinatorUrl: adminUrl, workers: citusWorkers };
    return { name, url: await createCitusDatabase(nodes, name), drop: () => dropCitusDatabase(nodes, name) };
  }
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database ${name} template ${inject('templateDatabase')}`);
  } finally {
    await admin.end();
  }
  return {
    name,
    url: withDatabase(adminUrl, name),
    async drop() {
      const dropper = postgres(adminUrl, { max: 1, onnotice: () => {} });
      try {
        await dropper.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await dropper.end();
      }
    },
  };
}

/**
 * A file's pool size: what it asks for, capped by STEPKEY_TEST_POOL_MAX when
 * set. The database tests against a shared server (PostgreSQL 15's 100
 * connections, four files at once) run with a cap so that files asking for 60
 * each cannot exhaust it for the processes the other files spawn.
 */
export function testPoolSize(wanted: number): number {
  const cap = Number(process.env.STEPKEY_TEST_POOL_MAX);
  return Number.isInteger(cap) && cap > 0 ? Math.min(wanted, cap) : wanted;
}

export function useTestDatabase(options: { max?: number } = {}): () => TestDatabase {
  let database: TestDatabase | undefined;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const created = await createTestDatabase();
    drop = created.drop;
    // Its sessions may sit idle in a transaction as long as the test engine's lease: a test holds a
    // step at a gate for as long as it needs.
    const pool = connect(created.url, { max: testPoolSize(options.max ?? 10), idleInTransactionTimeoutMs: LONG_LEASE_MS });
    database = Object.assign(pool, { name: created.name });
  });
  afterAll(async () => {
    await database?.close();
    await drop?.();
  });
  return () => {
    if (!database) throw new Error('useTestDatabase(): the database is created in beforeAll');
    return database;
  };
}

/**
 * An empty database (not migrated: for migration and upgrade tests), created by the returned
 * function on first use and dropped after the file's tests: `const empty = useEmptyDatabase('x'); const url = await empty();`
 */
export function useEmptyDatabase(suffix: string): () => Promise<string> {
  const name = `stepkey_t_${inject('runId')}_${suffix}`;
  let created: Promise<string> | undefined;
  afterAll(async () => {
    if (!created) return;
    const admin = postgres(inject('adminUrl'), { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`drop database if exists ${name} with (force)`);
    } finally {
      await admin.end();
    }
  });
  return () =>
    (created ??= (async () => {
      const admin = postgres(inject('adminUrl'), { max: 1, onnotice: () => {} });
      try {
        await admin.unsafe(`create database ${name}`);
      } finally {
        await admin.end();
      }
      return withDatabase(inject('adminUrl'), name);
    })());
}
