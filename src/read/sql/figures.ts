/**
 * Figures over the whole database, for the metrics' gauges and the
 * dashboard's header: how many runs are in each open status (run-status.ts;
 * each count served by its status's index, never a scan of finished runs),
 * and the probe the dashboard's shared poll sends once a second to learn
 * whether anything changed.
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { runStatusTable, statusCondition, type RunStatusName } from '../run-status.js';
import { SqlText } from './sql-text.js';

/** Runs in each open status (stuck, failed, running, …). */
export async function openRunCounts(q: Queryable, clock: Clock): Promise<Partial<Record<RunStatusName, number>>> {
  const text = new SqlText(clock);
  const now = text.now();
  const open = runStatusTable.filter((status) => status.open);
  const counts = open.map(
    (status) => `(select count(*)::int from stepkey.ledger l where l.kind = 'run' and ${statusCondition(status.name, now)}) as "${status.name}"`,
  );
  const [row] = await q.unsafe<Record<string, number>[]>(`select ${counts.join(', ')}`, text.values as never[]);
  return row as Partial<Record<RunStatusName, number>>;
}

export interface ChangeProbe {
  /**
   * Postgres's own count of rows written to each table (its statistics,
   * flushed by each backend about once a second): when a number moved,
   * something changed. null when statistics are off (track_counts).
   */
  writes: string | null;
  /** The earliest lease of a running run still to expire: a run turns stuck then, without any write. */
  nextLeaseEndMs: number | null;
  nowMs: number;
}

const watched = ['stepkey.ledger', 'stepkey.steps', 'stepkey.inbox', 'stepkey.worker_pools', 'stepkey.audit_log', 'graphile_worker._private_jobs'];

/** One statement, no table read but one index probe (ledger_run_leases_idx). */
export async function probeChanges(q: Queryable, clock: Clock): Promise<ChangeProbe> {
  const text = new SqlText(clock);
  const now = text.now();
  const alias = (table: string) => `t_${table.replace(/\W/g, '_')}`;
  const written = (a: string) =>
    `coalesce(pg_stat_get_tuples_inserted(${a}.oid) + pg_stat_get_tuples_updated(${a}.oid) + pg_stat_get_tuples_deleted(${a}.oid), -1)::text`;
  const tables = watched.map((table) => written(alias(table))).join(` || ',' || `);
  const from = watched.map((table) => `(select to_regclass('${table}') as oid) ${alias(table)}`).join(', ');
  const [row] = await q.unsafe<ChangeProbe[]>(
    `select case when current_setting('track_counts')::bool then ${tables} end as writes,
            (select (extract(epoch from min(l.locked_until)) * 1000)::float8 from stepkey.ledger l
              where l.kind = 'run' and l.status = 'in_progress' and l.locked_until > ${now}) as "nextLeaseEndMs",
            (extract(epoch from ${now}) * 1000)::float8 as "nowMs"
       from ${from}`,
    text.values as never[],
  );
  return row!;
}
