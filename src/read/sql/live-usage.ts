/**
 * What the database still holds that a deploy could strand, for `stepkey
 * check`: runs that may still execute (in progress or failed — resumable) or
 * replay (completed and not yet expired), by workflow version and by the step
 * names they recorded; and jobs waiting for each task.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';

export type UsageStatus = 'in_progress' | 'failed' | 'completed';

export interface VersionUsage {
  workflow: string;
  version: number;
  status: UsageStatus;
  runs: number;
  /** A few of the runs, newest first. */
  scopes: string[];
  keys: string[];
}

export interface StepUsage extends VersionUsage {
  /** The step's name without its `[id]` discriminator. */
  step: string;
}

export interface TaskUsage {
  task: string;
  pending: number;
  failed: number;
}

const EXAMPLES = 3;

export function runsByVersion(q: Queryable, clock: Clock): Promise<VersionUsage[]> {
  const now = sqlNow(q, clock);
  return q<VersionUsage[]>`
    select l.name as workflow, l.version, l.status, count(*)::int as runs,
           (array_agg(l.scope order by l.created_at desc))[1:${EXAMPLES}] as scopes,
           (array_agg(l.key order by l.created_at desc))[1:${EXAMPLES}] as keys
      from stepkey.ledger l
     where l.kind = 'run'
       and (l.status in ('in_progress', 'failed')
            or (l.status = 'completed' and l.outcome_ok and l.expires_at > ${now}))
     group by l.name, l.version, l.status
     order by l.name, l.version, l.status`;
}

/** Step names (built-in `$now`/`$uuid` left out) recorded by those runs. */
export function stepsByVersion(q: Queryable, clock: Clock): Promise<StepUsage[]> {
  const now = sqlNow(q, clock);
  return q<StepUsage[]>`
    select workflow, version, step, status, count(*)::int as runs,
           (array_agg(scope order by created_at desc))[1:${EXAMPLES}] as scopes,
           (array_agg(key order by created_at desc))[1:${EXAMPLES}] as keys
      from (
        select distinct l.name as workflow, l.version, split_part(c.name, '[', 1) as step, l.status,
               l.scope, l.key, l.created_at
          from stepkey.ledger l
          join stepkey.key_rows c on c.scope = l.scope and c.parent_key = l.key
         where l.kind = 'run'
           and (l.status in ('in_progress', 'failed')
                or (l.status = 'completed' and l.outcome_ok and l.expires_at > ${now}))
           and c.name is not null and c.name not like '$%'
      ) used
     group by workflow, version, step, status
     order by workflow, version, step, status`;
}

/** Jobs not yet done, by task; none when graphile-worker's schema is not installed. */
export async function jobsByTask(q: Queryable): Promise<TaskUsage[]> {
  const [installed] = await q<{ ok: boolean }[]>`select to_regclass('graphile_worker.jobs') is not null as ok`;
  if (!installed?.ok) return [];
  return q<TaskUsage[]>`
    select task_identifier as task,
           count(*) filter (where attempts < max_attempts)::int as pending,
           count(*) filter (where attempts >= max_attempts)::int as failed
      from graphile_worker.jobs
     group by task_identifier
     order by task_identifier`;
}
