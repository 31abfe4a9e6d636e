/**
 * Worker pools as operators see them: alive (beating), silent (stopped
 * beating, about to be declared dead), stopped (shut down cleanly) or
 * unlocked (declared dead by the other workers, which unlocked its jobs);
 * with the jobs each holds right now. worker_pools holds a row per pool
 * until a day after it stopped. A pool declared dead that beats again (it
 * had stalled) is alive again; its unlocked_at stays as a record.
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { graphileInstalled } from './jobs.js';
import { SqlText } from './sql-text.js';

export type PoolState = 'alive' | 'silent' | 'stopped' | 'unlocked';

export interface WorkerPool {
  poolId: string;
  hostname: string;
  pid: number;
  state: PoolState;
  /** Milliseconds since the epoch. */
  startedAt: number;
  lastBeatAt: number;
  stoppedAt: number | null;
  unlockedAt: number | null;
  /** Jobs locked by this pool now. */
  jobsHeld: number;
}

/** Pools, live ones first. A pool silent for over `deadAfterMs` (the workers' lease) is silent. */
export async function listWorkerPools(q: Queryable, clock: Clock, deadAfterMs: number): Promise<WorkerPool[]> {
  const text = new SqlText(clock);
  const now = text.now();
  const held = (await graphileInstalled(q))
    ? '(select count(*)::int from graphile_worker.jobs j where j.locked_by = p.pool_id)'
    : '0';
  return q.unsafe<WorkerPool[]>(
    `select p.pool_id as "poolId", p.hostname, p.pid,
            case when p.stopped_at is not null and p.unlocked_at is not null then 'unlocked'
                 when p.stopped_at is not null then 'stopped'
                 when p.last_beat_at < ${now} - ${text.param(deadAfterMs)}::float8 * interval '1 millisecond' then 'silent'
                 else 'alive' end as state,
            (extract(epoch from p.started_at) * 1000)::float8 as "startedAt",
            (extract(epoch from p.last_beat_at) * 1000)::float8 as "lastBeatAt",
            (extract(epoch from p.stopped_at) * 1000)::float8 as "stoppedAt",
            (extract(epoch from p.unlocked_at) * 1000)::float8 as "unlockedAt",
            ${held} as "jobsHeld"
       from stepkey.worker_pools p
      order by p.stopped_at is not null, p.last_beat_at desc
      limit 200`,
    text.values as never[],
  );
}
