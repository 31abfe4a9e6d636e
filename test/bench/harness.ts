/**
 * Benchmark harness: a database of its own on the server in DATABASE_URL (or
 * an embedded one with default durability), timed loops at a given
 * concurrency, medians of several runs, and a printed table.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import postgres from 'postgres';
import { migrate } from '../../src/db/migrate.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/embedded/start-embedded.js';
import { withDatabase } from '../helpers/urls.js';

export interface BenchDatabase {
  url: string;
  /** Another database on the same cluster, migrated, and the function that drops it. */
  fresh(): Promise<{ url: string; drop(): Promise<void> }>;
  close(): Promise<void>;
}

export async function benchDatabase(): Promise<BenchDatabase> {
  let embedded: EmbeddedPostgres | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await startEmbeddedPostgres({ dir: join(process.cwd(), '.stepkey', 'pg-bench') });
    adminUrl = embedded.url;
  }
  const create = async () => {
    const created = await emptyDatabase(adminUrl!);
    await migrate(created.url);
    return created;
  };
  const first = await create();
  return {
    url: first.url,
    fresh: create,
    async close() {
      await first.drop();
      await embedded?.stop();
    },
  };
}

/** A database of its own, not migrated, on the server of `adminUrl` (`label` in its name), and the function that drops it. */
export async function emptyDatabase(adminUrl: string, label = 'bench'): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `stepkey_${label}_${randomBytes(3).toString('hex')}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  return {
    url: withDatabase(adminUrl, name),
    async drop() {
      const dropper = postgres(adminUrl, { max: 1, onnotice: () => {} });
      await dropper.unsafe(`drop database if exists ${name} with (force)`);
      await dropper.end();
    },
  };
}

export interface Measurement {
  opsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs `op(i)` for `ops` operations with `concurrency` in flight. */
export async function measure(
  ops: number,
  concurrency: number,
  op: (i: number) => Promise<unknown>,
): Promise<Measurement> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ops) {
        const i = next;
        next += 1;
        const t0 = performance.now();
        await op(i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return { opsPerSecond: ops / elapsed, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99) };
}

/** The run with the median throughput of `runs` runs. */
export async function medianOf(runs: number, once: (run: number) => Promise<Measurement>): Promise<Measurement> {
  const results: Measurement[] = [];
  for (let run = 0; run < runs; run += 1) results.push(await once(run));
  results.sort((a, b) => a.opsPerSecond - b.opsPerSecond);
  return results[Math.floor(results.length / 2)]!;
}

export function printTable(title: string, header: string[], rows: (string | number)[][]): void {
  const cells = [header, ...rows.map((row) => row.map((cell) => (typeof cell === 'number' ? format(cell) : cell)))];
  const widths = header.map((_, i) => Math.max(...cells.map((row) => String(row[i] ?? '').length)));
  console.log(`\n${title}`);
  cells.forEach((row, index) => {
    console.log(row.map((cell, i) => String(cell).padEnd(widths[i]!)).join('  '));
    if (index === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  });
}

function format(value: number): string {
  if (value >= 100) return Math.round(value).toLocaleString('en-US');
  if (value >= 10) return value.toFixed(1);
  return value.toFixed(2);
}
