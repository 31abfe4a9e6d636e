/**
 * What one operation costs the database and the process, per operation:
 * the statements its pool sent (counted by the client, begin and commit
 * included), the commits and the WAL it wrote (deltas of pg_stat_database
 * and pg_stat_wal: the bench's cluster serves nothing else), the WAL flushes
 * (durability: at least one per writing commit, run after run), the Node
 * CPU time of this process, and the CPU time of the whole PostgreSQL cluster
 * when it runs on this machine (the postmaster and every process it started,
 * those that exited included, from /proc: backends, WAL writer, checkpointer,
 * autovacuum — the bench's cluster serves nothing else).
 *
 * The operations run one after another on a pool of their own, which is
 * closed before the statistics are read: a backend reports its counters when
 * it exits, so nothing is left unreported.
 */
import postgres from 'postgres';
import { readFileSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type Database } from '../../src/db/connect.js';

export interface OperationCost {
  statements: number;
  commits: number;
  walFlushes: number;
  walRecords: number;
  walBytes: number;
  cpuMs: number;
  /** NaN when the server's processes cannot be read here. */
  postgresCpuMs: number;
}

interface Counters {
  commits: number;
  walFlushes: number;
  walRecords: number;
  walBytes: number;
}

/** utime + stime (+ the reaped children's, for `withChildren`) of a process, in clock ticks. */
function processTicks(pid: number, withChildren: boolean): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const own = Number(fields[11]) + Number(fields[12]);
  return withChildren ? own + Number(fields[13]) + Number(fields[14]) : own;
}

/** The cluster's CPU so far, in ms: the postmaster, its live children, and those it has reaped. */
export function clusterCpuMs(postmaster: number): number {
  let ticks = processTicks(postmaster, true);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) ticks += processTicks(Number(entry), false);
    } catch {
      // Gone meanwhile: its time is in the postmaster's reaped children's.
    }
  }
  return ticks * 10; // USER_HZ is 100 on Linux
}

/** The postmaster's pid, when the server runs on this machine; undefined otherwise. */
export async function postmasterOf(url: string): Promise<number | undefined> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const stat = readFileSync(`/proc/${row!.pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  } finally {
    await sql.end();
  }
}

async function counters(url: string): Promise<Counters> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    // WAL fsyncs: pg_stat_wal.wal_sync up to PostgreSQL 17, pg_stat_io's WAL rows from 18 on.
    const [server] = await sql<{ version: number }[]>`select current_setting('server_version_num')::int as version`;
    const flushes = server!.version >= 180000 ? `(select coalesce(sum(fsyncs), 0) from pg_stat_io where object = 'wal')` : 'w.wal_sync';
    const [row] = await sql.unsafe<{ commits: string; flushes: string; records: string; bytes: string }[]>(`
      select d.xact_commit::text as commits, ${flushes}::text as flushes, w.wal_records::text as records, w.wal_bytes::text as bytes
        from pg_stat_database d, pg_stat_wal w
       where d.datname = current_database()`);
    return { commits: Number(row!.commits), walFlushes: Number(row!.flushes), walRecords: Number(row!.records), walBytes: Number(row!.bytes) };
  } finally {
    await sql.end();
  }
}

/**
 * The cost of `operations` operations, each `operation(i)` run after the last,
 * on subjects `open` builds over a fresh pool (an engine, or the pool itself).
 * One warm-up operation runs before counting starts (its connection's setup
 * is not the operation's).
 */
export async function costPerOperation<Subject>(
  url: string,
  operations: number,
  open: (db: Database) => Subject,
  operation: (subject: Subject, i: number) => Promise<unknown>,
  close: (subject: Subject) => Promise<void>,
): Promise<OperationCost> {
  let statements = 0;
  let counting = false;
  const db = connect(url, { max: 4, onStatement: () => (counting ? (statements += 1) : undefined) });
  const subject = open(db);
  let cpu: NodeJS.CpuUsage;
  let before: Counters;
  const postmaster = await postmasterOf(url);
  let postgresCpu = Number.NaN;
  try {
    await operation(subject, -1);
    before = await counters(url);
    postgresCpu = postmaster === undefined ? Number.NaN : clusterCpuMs(postmaster);
    counting = true;
    cpu = process.cpuUsage();
    for (let i = 0; i < operations; i += 1) await operation(subject, i);
    cpu = process.cpuUsage(cpu);
    counting = false;
  } finally {
    await close(subject);
    await db.close();
  }
  // The pool's backends report their counters as they exit, a moment after the client hangs up.
  await sleep(300);
  const after = await counters(url);
  postgresCpu = postmaster === undefined ? Number.NaN : clusterCpuMs(postmaster) - postgresCpu;
  // The first read of the counters is a transaction of its own, reported when its connection closed: not the operations'.
  return {
    statements: statements / operations,
    commits: (after.commits - before.commits - 1) / operations,
    walFlushes: (after.walFlushes - before.walFlushes) / operations,
    walRecords: (after.walRecords - before.walRecords) / operations,
    walBytes: (after.walBytes - before.walBytes) / operations,
    cpuMs: (cpu.user + cpu.system) / 1000 / operations,
    postgresCpuMs: postgresCpu / operations,
  };
}

export const costHeader = ['statements', 'commits', 'WAL flushes', 'WAL records', 'WAL bytes', 'Node CPU ms', 'Postgres CPU ms'];

export function costCells(cost: OperationCost): (string | number)[] {
  return [cost.statements.toFixed(1), cost.commits.toFixed(2), cost.walFlushes.toFixed(2), cost.walRecords.toFixed(1), Math.round(cost.walBytes), cost.cpuMs.toFixed(3),
    Number.isNaN(cost.postgresCpuMs) ? '—' : cost.postgresCpuMs.toFixed(2)];
}
