/** Migrates a database for the example app: stepkey's tables, graphile-worker's, then the shop's. */
import { fileURLToPath } from 'node:url';
import { migrate } from 'stepkey';

export const exampleMigrations = {
  folder: fileURLToPath(new URL('./migrations', import.meta.url)),
  schema: 'shop',
  table: '__migrations',
};

export async function migrateExample(url: string): Promise<void> {
  await migrate(url, { app: [exampleMigrations] });
}
