import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { Engine } from '../../src/engine/engine.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { runCli } from '../helpers/cli.js';
import { withDatabase } from '../helpers/urls.js';
import { z } from 'zod';

const prefix = `stepkey_t_${inject('runId')}_migrate`;
const admin = () => postgres(inject('adminUrl'), { max: 1, onnotice: () => {} });
const created: string[] = [];
const folders: string[] = [];
const drizzleKit = fileURLToPath(new URL('../../node_modules/drizzle-kit/bin.cjs', import.meta.url));

async function freshDatabase(suffix: string): Promise<string> {
  const name = `${prefix}_${suffix}`;
  const sql = admin();
  await sql.unsafe(`create database ${name}`);
  await sql.end();
  created.push(name);
  return withDatabase(inject('adminUrl'), name);
}

afterAll(async () => {
  const sql = admin();
  for (const name of created) await sql.unsafe(`drop database if exists ${name} with (force)`);
  await sql.end();
  for (const folder of folders) await rm(folder, { recursive: true, force: true });
});

/** An app's drizzle-kit output folder, with the migrations given (tag → SQL), and a drizzle.config.ts next to it. */
async function appFolder(migrations: Record<string, string>): Promise<{ root: string; folder: string }> {
  const root = await mkdtemp(join(tmpdir(), 'stepkey-app-migrations-'));
  folders.push(root);
  const folder = join(root, 'drizzle');
  await mkdir(join(folder, 'meta'), { recursive: true });
  const entries = Object.keys(migrations).map((tag, idx) => ({ idx, version: '7', when: 1_700_000_000_000 + idx * 1_000, tag, breakpoints: true }));
  for (const [tag, text] of Object.entries(migrations)) await writeFile(join(folder, `${tag}.sql`), text);
  await writeFile(join(folder, 'meta', '_journal.json'), JSON.stringify({ version: '7', dialect: 'postgresql', entries }));
  await writeFile(join(root, 'drizzle.config.ts'), "export default { dialect: 'postgresql', out: './drizzle', dbCredentials: { url: process.env.DATABASE_URL } };\n");
  return { root, folder };
}

describe('migrate', () => {
  it('serialises concurrent migrators on an advisory lock and applies everything once', async () => {
    const url = await freshDatabase('lock');
    await Promise.all(Array.from({ length: 4 }, () => migrate(url)));
    await migrate(url);

    const db = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const applied = await db`select count(*)::int as n from stepkey.__migrations`;
      expect(applied[0]!.n).toBeGreaterThanOrEqual(2);
      const tables = await db`select table_name from information_schema.tables where table_schema = 'stepkey' order by 1`;
      expect(tables.map((t) => t.table_name)).toEqual(
        expect.arrayContaining(['inbox', 'ledger', 'worker_pools']),
      );
      const worker = await db`select count(*)::int as n from information_schema.schemata where schema_name = 'graphile_worker'`;
      expect(worker[0]!.n).toBe(1);
      const publicTables = await db`select count(*)::int as n from information_schema.tables where table_schema = 'public'`;
      expect(publicTables[0]!.n).toBe(0);
    } finally {
      await db.end();
    }
  });

  it("keeps an app's drizzle-kit journal: what drizzle-kit migrate applied is not applied again, what it did not is", async () => {
    const url = await freshDatabase('journal');
    // Plain CREATE TABLE: applying it twice would fail.
    const first = { '0000_widgets': 'CREATE TABLE "widgets" ("id" serial PRIMARY KEY NOT NULL, "name" text NOT NULL);' };
    const app = await appFolder(first);
    await promisify(execFile)(process.execPath, [drizzleKit, 'migrate', '--config', 'drizzle.config.ts'], {
      cwd: app.root,
      env: { ...process.env, DATABASE_URL: url },
    });

    await migrate(url, { app: [{ folder: app.folder }] });
    const db = postgres(url, { max: 1, onnotice: () => {} });
    try {
      expect((await db`select count(*)::int as n from drizzle.__drizzle_migrations`)[0]!.n).toBe(1);
      // The app adds a migration; stepkey's migrate applies it, in the same journal.
      const grown = await appFolder({ ...first, '0001_gadgets': 'CREATE TABLE "gadgets" ("id" serial PRIMARY KEY NOT NULL);' });
      await migrate(url, { app: [{ folder: grown.folder }] });
      expect((await db`select count(*)::int as n from drizzle.__drizzle_migrations`)[0]!.n).toBe(2);
      expect((await db`select to_regclass('public.gadgets') is not null as made`)[0]!.made).toBe(true);
      // And drizzle-kit, run again, finds nothing left to do.
      await promisify(execFile)(process.execPath, [drizzleKit, 'migrate', '--config', 'drizzle.config.ts'], {
        cwd: grown.root,
        env: { ...process.env, DATABASE_URL: url },
      });
      expect((await db`select count(*)::int as n from drizzle.__drizzle_migrations`)[0]!.n).toBe(2);
    } finally {
      await db.end();
    }
  });

  it('says to run stepkey migrate when the database has no stepkey tables', async () => {
    const url = await freshDatabase('bare');
    const workflow = defineWorkflow({ name: 'unmigrated', version: 1, input: z.object({}), steps: { only: step('only.v1') }, async run() {} });
    const engine = new Engine({ database: url, workflows: [workflow], onError: () => {} });
    try {
      await expect(engine.run(workflow, { scope: 'acme', key: 'k-1' }, {})).rejects.toMatchObject({
        code: 'not_migrated',
        message: expect.stringMatching(/relation "stepkey\.ledger" does not exist.*run `stepkey migrate`/),
      });
    } finally {
      await engine.shutdown();
    }
    const cli = await runCli(['runs'], { databaseUrl: url });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(/no stepkey tables .* run `stepkey migrate`/);
  });

  it('migrate --citus refuses a database without the citus extension before applying anything', async () => {
    const url = await freshDatabase('nocitus');
    const cli = await runCli(['migrate', '--citus'], { databaseUrl: url });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(/needs the citus extension in this database.*CREATE EXTENSION citus/);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from information_schema.tables where table_schema = 'stepkey'`;
      expect(row!.n).toBe(0);
    } finally {
      await sql.end();
    }
  });
});
