/**
 * A test file's database on the Citus cluster of the Citus stage
 * (vitest.citus.config.ts): created on the coordinator and on both workers
 * with the extension, the coordinator's host and the workers added in it,
 * then `migrate --citus` (stepkey's scoped tables distributed by scope) and
 * the example app's migrations. Setup fails unless each scoped table is
 * distributed (pg_dist_partition).
 */
import postgres from 'postgres';
import { migrate } from '../../src/db/migrate.js';
import { SCOPED_TABLES } from '../../src/db/citus.js';
import { exampleMigrations } from '../../workflows/db/migrate.js';
import { withDatabase } from '../helpers/urls.js';

export interface CitusNodes {
  coordinatorUrl: string;
  /** host:port of each worker. */
  workers: readonly string[];
}

function nodeUrl(coordinatorUrl: string, hostPort: string, database: string): string {
  const url = new URL(withDatabase(coordinatorUrl, database));
  const [host, port] = hostPort.split(':');
  url.hostname = host ?? '127.0.0.1';
  url.port = port ?? '5432';
  return url.toString();
}

async function onNode(url: string, statements: string[]): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    for (const statement of statements) await sql.unsafe(statement);
  } finally {
    await sql.end();
  }
}

export async function createCitusDatabase(nodes: CitusNodes, name: string): Promise<string> {
  const coordinator = new URL(nodes.coordinatorUrl);
  for (const node of [`${coordinator.hostname}:${coordinator.port}`, ...nodes.workers]) {
    await onNode(nodeUrl(nodes.coordinatorUrl, node, 'postgres'), [`create database ${name}`]);
    await onNode(nodeUrl(nodes.coordinatorUrl, node, name), ['create extension citus']);
  }
  const url = withDatabase(nodes.coordinatorUrl, name);
  await onNode(url, [
    `select citus_set_coordinator_host('${coordinator.hostname}', ${Number(coordinator.port)})`,
    ...nodes.workers.map((node) => {
      const [host, port] = node.split(':');
      return `select citus_add_node('${host}', ${Number(port)})`;
    }),
  ]);
  await migrate(url, { app: [exampleMigrations], citus: true });
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ table: string }[]>`
      select split_part(logicalrelid::regclass::text, '.', 2) as table
        from pg_dist_partition where partmethod = 'h' and logicalrelid::regclass::text like 'stepkey.%'`;
    const distributed = new Set(rows.map((row) => row.table));
    const missing = SCOPED_TABLES.filter((table) => !distributed.has(table));
    if (missing.length) throw new Error(`${name}: not distributed by scope: ${missing.join(', ')}`);
    // A transition routed to a worker must leave limit slots to the coordinator there too.
    const inline = await sql<{ result: string }[]>`
      select result from run_command_on_workers('select stepkey.limit_slots_given_back_inline()')`;
    if (inline.length !== nodes.workers.length || inline.some((row) => row.result !== 'f')) {
      throw new Error(`${name}: limit_slots_given_back_inline() is not false on every worker: ${JSON.stringify(inline)}`);
    }
  } finally {
    await sql.end();
  }
  return url;
}

export async function dropCitusDatabase(nodes: CitusNodes, name: string): Promise<void> {
  const coordinator = new URL(nodes.coordinatorUrl);
  for (const node of [`${coordinator.hostname}:${coordinator.port}`, ...nodes.workers]) {
    await onNode(nodeUrl(nodes.coordinatorUrl, node, 'postgres'), [`drop database if exists ${name} with (force)`]).catch(() => {});
  }
}
