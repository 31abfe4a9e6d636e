/**
 * stepkey on Citus: its scoped tables distributed by `scope`, co-located, so
 * that every statement of a run's life (each names its scope) runs on one
 * node and commits there. Bookkeeping that is global by nature — queues and
 * their partitions, limits and theirs, the inbox, worker pools — stays on the
 * coordinator beside graphile-worker's jobs, as plain local tables (not
 * reference tables, which would commit on every node).
 *
 * `distributeByScope` is idempotent: a table already distributed is left as
 * it is, and what it placed where is returned either way.
 */
import type postgres from 'postgres';

/** stepkey's tables whose rows belong to one scope; the first is the co-location anchor. */
export const SCOPED_TABLES = [
  'ledger',
  'steps',
  'step_attempts',
  'mailbox',
  'audit_log',
  'queue_entries',
  'limit_slots',
] as const;

/** The tables that stay on the coordinator: one row serves many scopes. */
export const COORDINATOR_TABLES = ['queues', 'queue_partitions', 'limits', 'limit_partitions', 'inbox', 'worker_pools'] as const;

export interface TablePlacement {
  table: string;
  /** `distributed by scope` or `coordinator`. */
  placement: 'distributed' | 'coordinator';
  /** Shards per node (`host:port` → count), for a distributed table. */
  shards: Record<string, number>;
  /** The table was distributed by this call (false: it already was, or it stays local). */
  changed: boolean;
}

export class CitusMissingError extends Error {
  constructor(detail: string) {
    super(`stepkey migrate --citus needs the citus extension in this database (${detail}): CREATE EXTENSION citus, then add the workers with citus_add_node.`);
    this.name = 'CitusMissingError';
  }
}

/**
 * Whether stepkey's tables are distributed by Citus in the database `sql`
 * reaches — asked once per pool (flow control and step limits share the
 * answer; a failed check is asked again): a queue's dispatch then takes the
 * steps Citus can run (lifecycle/dispatch-distributed.ts), and so does a step
 * limit's acquire and give-back (flow/sql/limits-distributed.ts).
 */
export function tablesDistributed(sql: postgres.ISql): Promise<boolean> {
  let known = distributedByPool.get(sql);
  if (!known) {
    known = readDistributed(sql);
    distributedByPool.set(sql, known);
    known.catch(() => distributedByPool.delete(sql));
  }
  return known;
}

const distributedByPool = new WeakMap<postgres.ISql, Promise<boolean>>();

async function readDistributed(sql: postgres.ISql): Promise<boolean> {
  const [ext] = await sql<{ citus: boolean }[]>`select exists (select 1 from pg_extension where extname = 'citus') as citus`;
  if (!ext?.citus) return false;
  const [table] = await sql<{ distributed: boolean }[]>`
    select exists (select 1 from pg_dist_partition where logicalrelid = 'stepkey.queue_entries'::regclass) as distributed`;
  return table?.distributed ?? false;
}

/** Refuses a database without the citus extension or without a worker node (checked before migrating). */
export async function assertCitus(sql: postgres.Sql): Promise<void> {
  const [ext] = await sql<{ version: string | null }[]>`
    select (select extversion from pg_extension where extname = 'citus') as version`;
  if (!ext?.version) throw new CitusMissingError('no citus extension');
  const [workers] = await sql<{ n: number }[]>`select count(*)::int as n from pg_dist_node where noderole = 'primary' and groupid <> 0`;
  if (!workers || workers.n === 0) throw new CitusMissingError('no worker node: citus_add_node');
}

/** Distributes the scoped tables by scope (co-located with stepkey.ledger) and reports placements. */
export async function distributeByScope(sql: postgres.Sql): Promise<TablePlacement[]> {
  await assertCitus(sql);

  const changed = new Set<string>();
  for (const table of SCOPED_TABLES) {
    const qualified = `stepkey.${table}`;
    const [known] = await sql<{ method: string | null }[]>`
      select (select partmethod::text from pg_dist_partition where logicalrelid = ${qualified}::regclass) as method`;
    if (known?.method === 'h') continue;
    if (known?.method) throw new Error(`${qualified} is already in Citus's metadata but not distributed by hash (partmethod ${known.method}).`);
    const colocate = table === SCOPED_TABLES[0] ? 'default' : `stepkey.${SCOPED_TABLES[0]}`;
    await sql`select create_distributed_table(${qualified}::regclass, 'scope', colocate_with => ${colocate})`;
    changed.add(table);
  }

  // A run's transition on a node leaves its limit slots to the coordinator (migration 0017).
  await sql`create or replace function stepkey.limit_slots_given_back_inline() returns boolean language sql immutable as $$ select false $$`;

  const shards = await sql<{ table: string; node: string; n: number }[]>`
    select split_part(table_name::text, '.', 2) as table, nodename || ':' || nodeport as node, count(*)::int as n
      from citus_shards
     where table_name::text like 'stepkey.%'
     group by 1, 2 order by 1, 2`;
  const placements: TablePlacement[] = SCOPED_TABLES.map((table) => ({
    table,
    placement: 'distributed' as const,
    shards: Object.fromEntries(shards.filter((row) => row.table === table).map((row) => [row.node, row.n])),
    changed: changed.has(table),
  }));
  for (const table of COORDINATOR_TABLES) placements.push({ table, placement: 'coordinator', shards: {}, changed: false });
  return placements;
}
