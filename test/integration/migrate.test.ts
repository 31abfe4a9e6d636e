import postgres from 'postgres';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { withDatabase } from '../helpers/urls.js';

const name = `stepkey_t_${inject('runId')}_migrate`;
const admin = () => postgres(inject('adminUrl'), { max: 1, onnotice: () => {} });

afterAll(async () => {
  const sql = admin();
  await sql.unsafe(`drop database if exists ${name} with (force)`);
  await sql.end();
});

describe('migrate', () => {
  it('serialises concurrent migrators on an advisory lock and applies everything once', async () => {
    const sql = admin();
    await sql.unsafe(`create database ${name}`);
    await sql.end();
    const url = withDatabase(inject('adminUrl'), name);

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
});
