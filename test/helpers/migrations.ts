/**
 * A database as a previous release left it: stepkey's migrations before a
 * given one applied, recorded where migrate() records them, so that
 * migrate() then applies the rest — for the tests of an upgrade.
 */
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { drizzle } from 'drizzle-orm/postgres-js';
import { migrate as drizzleMigrate } from 'drizzle-orm/postgres-js/migrator';
import { migrationsFolder } from '../../src/db/migrate.js';

/** Applies stepkey's migrations whose tags sort before `before` (e.g. '0011') to `url`. */
export async function migrateBefore(url: string, before: string): Promise<void> {
  const folder = await mkdtemp(join(tmpdir(), 'stepkey-migrations-before-'));
  try {
    await mkdir(join(folder, 'meta'), { recursive: true });
    const journal = JSON.parse(await readFile(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as { entries: { tag: string }[] };
    const entries = journal.entries.filter((entry) => entry.tag < before);
    for (const entry of entries) await cp(join(migrationsFolder, `${entry.tag}.sql`), join(folder, `${entry.tag}.sql`));
    await writeFile(join(folder, 'meta', '_journal.json'), JSON.stringify({ ...journal, entries }));
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await drizzleMigrate(drizzle({ client: sql }), { migrationsFolder: folder, migrationsSchema: 'stepkey', migrationsTable: '__migrations' });
    } finally {
      await sql.end();
    }
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}
