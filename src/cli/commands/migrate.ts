/**
 * `stepkey migrate`: applies stepkey's migrations, graphile-worker's, and the
 * app module's own (its `migrations` export) under one advisory lock.
 * Idempotent: what is applied already is skipped.
 */
import { loadAppModule } from '../app-module.js';
import { describeUrl, type Command } from '../context.js';
import { ExitCode } from '../errors.js';

export const migrateCommand: Command = {
  name: 'migrate',
  description: `
Applies stepkey's own migrations, graphile-worker's schema and, if the app
module exports \`migrations\` (an array of { folder, schema?, table? } drizzle-kit
output folders; relative folders resolve against the working directory), the
app's migrations after them. An app's migrations are recorded in drizzle's own
journal (drizzle.__drizzle_migrations) unless schema/table name another, so
what drizzle-kit migrate applied is never applied again. Concurrent migrators
wait for each other; running it again applies nothing new.`,
  positionals: [],
  options: {},
  async run(context) {
    const url = context.databaseUrl();
    const app = await loadAppModule(context, { required: false });
    const appMigrations = (app?.migrations ?? []).map((entry) => ({ ...entry, folder: context.resolvePath(entry.folder) }));
    const { migrate } = await import('../../db/migrate.js');
    await migrate(url, { app: appMigrations });
    if (context.json) {
      context.printJson({ migrated: true, database: describeUrl(url), app: appMigrations.map((entry) => entry.folder) });
    } else {
      context.line(`Migrated ${describeUrl(url)}: stepkey, graphile_worker${appMigrations.length ? `, ${appMigrations.length} app folder(s)` : ''}.`);
    }
    return ExitCode.ok;
  },
};
