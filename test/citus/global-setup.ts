/**
 * The Citus stage's run: its cluster is brought up by .ci/run (or by hand with
 * test/citus/cluster.sh) and named by STEPKEY_CITUS_URL (the coordinator, any
 * database) and STEPKEY_CITUS_WORKERS (host:port,host:port). Each test file
 * gets a database of its own on all three nodes (test/citus/database.ts).
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import type { TestProject } from 'vitest/node';

let adminUrl = '';
let workers: string[] = [];
let runId = '';

export function citusNodesFromEnv(): { coordinatorUrl: string; workers: string[] } {
  const url = process.env.STEPKEY_CITUS_URL;
  const list = process.env.STEPKEY_CITUS_WORKERS;
  if (!url || !list) throw new Error('The Citus tests need STEPKEY_CITUS_URL (the coordinator) and STEPKEY_CITUS_WORKERS (host:port,host:port).');
  return { coordinatorUrl: url, workers: list.split(',').map((entry) => entry.trim()).filter(Boolean) };
}

export function setup(project: TestProject): void {
  const nodes = citusNodesFromEnv();
  adminUrl = nodes.coordinatorUrl;
  workers = nodes.workers;
  runId = randomBytes(4).toString('hex');
  project.provide('adminUrl', adminUrl);
  project.provide('templateDatabase', '');
  project.provide('runId', runId);
  project.provide('citusWorkers', workers);
}

export async function teardown(): Promise<void> {
  const coordinator = new URL(adminUrl);
  for (const node of [`${coordinator.hostname}:${coordinator.port}`, ...workers]) {
    const url = new URL(adminUrl);
    [url.hostname, url.port] = node.split(':') as [string, string];
    const admin = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      const rows = await admin<{ datname: string }[]>`select datname from pg_database where datname like ${`stepkey_%${runId}%`}`;
      for (const { datname } of rows) await admin.unsafe(`drop database if exists ${datname} with (force)`);
    } finally {
      await admin.end();
    }
  }
}
