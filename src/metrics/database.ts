/**
 * Gauges read from the database when the registry is scraped: runs in each
 * open status (the status table's open ones: stuck, failed, running, waiting), the
 * outbox's jobs by status and the age of its oldest job due, and worker
 * pools by state — the same read models the dashboard shows. One scrape
 * reads them once (three statements); scrapes closer together than
 * `minIntervalMs` share one reading.
 *
 * Every process that collects them reports the same database-wide values:
 * aggregate with max(), not sum().
 */
import { Gauge } from 'prom-client';
import type { Database } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { runStatusTable } from '../read/run-status.js';
import { openRunCounts } from '../read/sql/figures.js';
import { jobStatuses, outboxFigures } from '../read/sql/jobs.js';
import { listWorkerPools, type PoolState } from '../read/sql/workers.js';
import { registry } from './registry.js';

export interface DatabaseMetricsOptions {
  clock?: Clock;
  /** Scrapes within this many ms share one reading (default 5 000). */
  minIntervalMs?: number;
  /** A worker pool silent this long is reported silent (default 8 000, the workers' lease). */
  deadAfterMs?: number;
}

interface Reading {
  runs: Awaited<ReturnType<typeof openRunCounts>>;
  outbox: Awaited<ReturnType<typeof outboxFigures>>;
  pools: Record<PoolState, number>;
}

let source: (() => Promise<Reading>) | undefined;

const runsGauge = new Gauge({
  name: 'stepkey_runs',
  help: 'Runs in each open status, database-wide (completed and cancelled runs are not counted).',
  labelNames: ['status'],
  registers: [registry],
  async collect() {
    const reading = await read();
    if (!reading) return;
    for (const status of runStatusTable.filter((s) => s.open)) this.set({ status: status.name }, reading.runs[status.name] ?? 0);
  },
});

const jobsGauge = new Gauge({
  name: 'stepkey_outbox_jobs',
  help: 'Outbox jobs by status, database-wide: pending, running, retrying, failed (for good, waiting for a retry by hand).',
  labelNames: ['status'],
  registers: [registry],
  async collect() {
    const reading = await read();
    if (reading) for (const status of jobStatuses) this.set({ status }, reading.outbox.counts[status]);
  },
});

const oldestGauge = new Gauge({
  name: 'stepkey_outbox_oldest_pending_seconds',
  help: 'How long the oldest outbox job that is due and not taken by a worker has waited (0: none).',
  registers: [registry],
  async collect() {
    const reading = await read();
    if (reading) this.set(reading.outbox.oldestPendingMs / 1000);
  },
});

const poolsGauge = new Gauge({
  name: 'stepkey_worker_pools',
  help: 'Worker pools by state: alive, silent (stopped beating), stopped, unlocked (declared dead, jobs unlocked).',
  labelNames: ['state'],
  registers: [registry],
  async collect() {
    const reading = await read();
    if (reading) for (const [state, count] of Object.entries(reading.pools)) this.set({ state }, count);
  },
});

/** Makes the registry's gauges read this database at scrape time. */
export function collectDatabaseMetrics(database: Pick<Database, 'sql'>, options: DatabaseMetricsOptions = {}): void {
  const clock = options.clock ?? systemClock;
  const minIntervalMs = options.minIntervalMs ?? 5_000;
  const deadAfterMs = options.deadAfterMs ?? 8_000;
  let last: { at: number; reading: Promise<Reading> } | undefined;
  source = () => {
    if (last && Date.now() - last.at < minIntervalMs) return last.reading;
    const reading = (async (): Promise<Reading> => {
      const [runs, outbox, listed] = await Promise.all([
        openRunCounts(database.sql, clock),
        outboxFigures(database.sql),
        listWorkerPools(database.sql, clock, deadAfterMs),
      ]);
      const pools: Record<PoolState, number> = { alive: 0, silent: 0, stopped: 0, unlocked: 0 };
      for (const pool of listed) pools[pool.state] += 1;
      return { runs, outbox, pools };
    })();
    last = { at: Date.now(), reading };
    reading.catch(() => {
      if (last?.reading === reading) last = undefined;
    });
    return reading;
  };
}

/** The current reading, or none when no database is collected (or it could not be read: the gauges keep their last values). */
async function read(): Promise<Reading | undefined> {
  try {
    return await source?.();
  } catch {
    return undefined;
  }
}

export const databaseGauges = { runsGauge, jobsGauge, oldestGauge, poolsGauge };
