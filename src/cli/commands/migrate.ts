/**
 * `stepkey migrate`: applies stepkey's migrations, graphile-worker's, and the
 * app module's own (its `migrations` export) under one advisory lock.
 * Idempotent: what is applied already is skipped.
 */
import { loadAppModule } from '../app-module.js';
import { describeUrl, type Command } from '../context.js';
import { ExitCode } from '../errors.js';
import type { TablePlacement } from '../../db/citus.js';

export const migrateCommand: Command = {
  name: 'migrate',
  description: `
Applies stepkey's own migrations, graphile-worker's schema and, if the app
module exports \`migrations\` (an array of { folder, schema?, table? } drizzle-kit
output folders; relative folders resolve against the working directory), the
app's migrations after them. An app's migrations are recorded in drizzle's own
journal (drizzle.__drizzle_migrations) unless schema/table name another, so
what drizzle-kit migrate applied is never applied again. Concurrent migrators
wait for each other; running it again applies nothing new.

--citus (on a database with the citus extension and its workers added):
then distributes stepkey's scoped tables by scope, co-located with
stepkey.ledger, and prints where each table lives; the settings and
partitions of queues and limits, the inbox and graphile-worker's jobs stay on
the coordinator. Idempotent.`,
  positionals: [],
  options: {
    citus: { type: 'boolean', description: "distribute stepkey's scoped tables by scope (Citus)" },
  },
  async run(context, parsed) {
    const citus = parsed.values.citus === true;
    const url = context.databaseUrl();
    const app = await loadAppModule(context, { required: false });
    const appMigrations = (app?.migrations ?? []).map((entry) => ({ ...entry, folder: context.resolvePath(entry.folder) }));
    const { migrate } = await import('../../db/migrate.js');
    const placements = await migrate(url, { app: appMigrations, citus });
    if (context.json) {
      context.printJson({
        migrated: true,
        database: describeUrl(url),
        app: appMigrations.map((entry) => entry.folder),
        ...(placements ? { citus: placements } : {}),
      });
    } else {
      context.line(`Migrated ${describeUrl(url)}: stepkey, graphile_worker${appMigrations.length ? `, ${appMigrations.length} app folder(s)` : ''}.`);
      for (const placement of placements ?? []) context.line(describePlacement(placement));
    }
    return ExitCode.ok;
  },
};

function describePlacement(placement: TablePlacement): string {
  if (placement.placement === 'coordinator') return `  stepkey.${placement.table}: on the coordinator`;
  const nodes = Object.entries(placement.shards).map(([node, count]) => `${count} on ${node}`).join(', ');
  return `  stepkey.${placement.table}: distributed by scope${placement.changed ? ' (now)' : ''}, shards ${nodes}`;
}
