/**
 * The test run's Postgres. With DATABASE_URL set, tests use that server;
 * otherwise this run owns an embedded PostgreSQL (data in .stepkey/pg-test,
 * reused across runs, stopped when the run ends — or when vitest dies, since
 * the server's owner process watches its stdin).
 *
 * Each test file gets its own database, cloned from a template migrated once
 * here, so files run in parallel and leave nothing behind.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import postgres from 'postgres';
import type { TestProject } from 'vitest/node';
import { migrate } from '../../src/db/migrate.js';
import { exampleMigrations } from '../../workflows/db/migrate.js';
import { startEmbeddedPostgres, testClusterFlags, type EmbeddedPostgres } from '../../src/embedded/start-embedded.js';
import { withDatabase } from './urls.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    templateDatabase: string;
    runId: string;
    /** Set by the Citus stage (test/citus/global-setup.ts): each file's database spans these workers. */
    citusWorkers?: string[];
  }
}

let embedded: EmbeddedPostgres | undefined;
let adminUrl = '';
let runId = '';

export async function setup(project: TestProject): Promise<void> {
  if (process.env.DATABASE_URL) {
    adminUrl = process.env.DATABASE_URL;
  } else {
    embedded = await startEmbeddedPostgres({
      dir: join(process.cwd(), '.stepkey', 'pg-test'),
      flags: testClusterFlags,
    });
    adminUrl = embedded.url;
  }
  runId = randomBytes(4).toString('hex');
  const templateDatabase = `stepkey_tpl_${runId}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await dropLeftovers(admin);
    await admin.unsafe(`create database ${templateDatabase}`);
  } finally {
    await admin.end();
  }
  await migrate(withDatabase(adminUrl, templateDatabase), { app: [exampleMigrations] });
  project.provide('adminUrl', adminUrl);
  project.provide('templateDatabase', templateDatabase);
  project.provide('runId', runId);
}

export async function teardown(): Promise<void> {
  if (adminUrl) {
    const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
    try {
      const rows = await admin<{ datname: string }[]>`
        select datname from pg_database where datname like ${`stepkey_%${runId}%`}`;
      for (const { datname } of rows) await admin.unsafe(`drop database if exists ${datname} with (force)`);
    } finally {
      await admin.end();
    }
  }
  await embedded?.stop();
}

/** Databases left by runs that were killed: older than an hour, from any run. */
async function dropLeftovers(admin: postgres.Sql): Promise<void> {
  const rows = await admin<{ datname: string }[]>`
    select d.datname from pg_database d
     where d.datname ~ '^stepkey_(tpl|t)_'
       and (pg_stat_file('base/' || d.oid || '/PG_VERSION')).modification < now() - interval '1 hour'`.catch(
    () => [] as { datname: string }[],
  );
  for (const { datname } of rows) await admin.unsafe(`drop database if exists ${datname} with (force)`).catch(() => {});
}
