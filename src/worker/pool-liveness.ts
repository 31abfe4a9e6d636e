/**
 * Liveness of graphile-worker pools. graphile-worker 0.17 keeps the jobs of a
 * killed worker locked for four hours, locked under the pool's id (`pool-…`).
 * Each worker process records a heartbeat for its pool id; every worker
 * unlocks the jobs of pools whose heartbeat stopped.
 */
import { hostname } from 'node:os';
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';

export async function registerPool(q: Queryable, clock: Clock, poolId: string): Promise<void> {
  const now = sqlNow(q, clock);
  await q`
    insert into stepkey.worker_pools (pool_id, hostname, pid, started_at, last_beat_at)
    values (${poolId}, ${hostname()}, ${process.pid}, ${now}, ${now})
    on conflict (pool_id) do update set last_beat_at = excluded.last_beat_at, stopped_at = null`;
}

export async function beatPool(q: Queryable, clock: Clock, poolId: string): Promise<void> {
  const now = sqlNow(q, clock);
  await q`update stepkey.worker_pools set last_beat_at = ${now}, stopped_at = null where pool_id = ${poolId}`;
}

/** Marks a pool stopped after a graceful shutdown (its jobs are already released). */
export async function stopPool(q: Queryable, clock: Clock, poolId: string): Promise<void> {
  const now = sqlNow(q, clock);
  await q`update stepkey.worker_pools set stopped_at = ${now} where pool_id = ${poolId}`;
}

/**
 * Declares dead every pool silent for `deadAfterMs` and unlocks its jobs, in
 * one statement. Guarantee: a pool is unlocked once (the UPDATE marks it
 * stopped), and only pools that stopped beating — a live pool's jobs stay
 * locked by it. A worker passes its own pool as `self`: however late its
 * last beat looks (a stall between beating and this check), it never
 * unlocks its own jobs. Returns the pools unlocked.
 */
export async function unlockDeadPools(q: Queryable, clock: Clock, deadAfterMs: number, self: string | null = null): Promise<string[]> {
  const now = sqlNow(q, clock);
  const [row] = await q<{ ids: string[] }[]>`
    with dead as (
      update stepkey.worker_pools
         set stopped_at = ${now}, unlocked_at = ${now}
       where stopped_at is null
         and pool_id is distinct from ${self}::text
         and last_beat_at < ${now} - ${deadAfterMs}::float8 * interval '1 millisecond'
      returning pool_id
    ), ids as (
      select coalesce(array_agg(pool_id), '{}'::text[]) as ids from dead
    )
    select ids, graphile_worker.force_unlock_workers(ids) from ids`;
  return row?.ids ?? [];
}

/** Forgets pools stopped for a day. */
export async function purgePools(q: Queryable, clock: Clock): Promise<number> {
  const now = sqlNow(q, clock);
  const rows = await q`
    delete from stepkey.worker_pools where stopped_at < ${now} - interval '1 day' returning 1`;
  return rows.length;
}
