/**
 * The runs listing: every run (the ledger's run rows, one per run,
 * joined to its ledger row by primary key), with its status as an operator
 * sees it. "stuck" is an in-progress run whose lease has run out: its process
 * died and no sweeper has taken it over. Ordered stuck, failed, running, then
 * the rest; newest first within each group.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';

export const runStatuses = ['stuck', 'failed', 'running', 'completed', 'cancelled'] as const;
export type ListedStatus = (typeof runStatuses)[number];

export interface ListedRun {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  status: ListedStatus;
  /** Whether the next call with its key (or `stepkey resume`) goes on with it. */
  resumable: boolean;
  attempts: number;
  /** Milliseconds since the epoch. */
  createdAt: number;
  ageMs: number;
  /** Lease left (negative: expired that long ago); null when not in progress. */
  leaseLeftMs: number | null;
  /** The last error (failed), or the cancellation reason, as stored JSON text. */
  error: string | null;
}

export interface ListRunsFilter {
  status?: ListedStatus;
  workflow?: string;
  scope?: string;
  limit: number;
}

export function listRuns(q: Queryable, clock: Clock, filter: ListRunsFilter): Promise<ListedRun[]> {
  const now = sqlNow(q, clock);
  return q<ListedRun[]>`
    select * from (
      select l.scope, l.key, l.name as workflow, l.version,
             case when l.status = 'in_progress' and l.locked_until <= ${now} then 'stuck'
                  when l.status = 'in_progress' then 'running'
                  when l.status = 'failed' or (l.status = 'completed' and not l.outcome_ok) then 'failed'
                  else l.status end as status,
             l.status in ('in_progress', 'failed') as resumable,
             l.attempts, (extract(epoch from l.created_at) * 1000)::float8 as "createdAt",
             (extract(epoch from (${now} - l.created_at)) * 1000)::float8 as "ageMs",
             (extract(epoch from (l.locked_until - ${now})) * 1000)::float8 as "leaseLeftMs",
             case when l.status = 'failed' then l.last_error
                  when l.status = 'cancelled' or not l.outcome_ok then l.outcome end as error
        from stepkey.ledger l
       where l.kind = 'run'
         and (${filter.workflow ?? null}::text is null or l.name = ${filter.workflow ?? null}::text)
         and (${filter.scope ?? null}::text is null or l.scope = ${filter.scope ?? null}::text)
    ) runs
    where ${filter.status ?? null}::text is null or runs.status = ${filter.status ?? null}::text
    order by case runs.status when 'stuck' then 0 when 'failed' then 1 when 'running' then 2 else 3 end,
             runs."createdAt" desc, runs.scope, runs.key
    limit ${filter.limit}`;
}
