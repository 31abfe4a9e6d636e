/**
 * The child runs a run started (steps.x.child / startChild), oldest first,
 * with their status as operators see it: one statement per run shown,
 * through ledger_child_runs_idx (scope, parent_run).
 */
import type { Queryable } from '../../db/connect.js';
import { systemClock, type Clock } from '../../db/clock.js';
import { statusCaseSql, type RunStatusName } from '../run-status.js';
import { SqlText } from './sql-text.js';

export interface ChildRunInfo {
  scope: string;
  key: string;
  workflow: string;
  version: number | null;
  status: string;
  runStatus: RunStatusName;
  attempts: number;
  createdAt: number;
  completedAt: number | null;
}

export async function readChildRuns(q: Queryable, run: { scope: string; key: string }, clock: Clock = systemClock): Promise<ChildRunInfo[]> {
  const text = new SqlText(clock);
  const scope = text.param(run.scope);
  const parent = text.param(run.key);
  return q.unsafe<ChildRunInfo[]>(
    `select l.scope, l.key, coalesce(l.name, '') as workflow, l.version, l.status, ${statusCaseSql(text.now())} as "runStatus", l.attempts,
            (extract(epoch from l.created_at) * 1000)::float8 as "createdAt",
            (extract(epoch from l.completed_at) * 1000)::float8 as "completedAt"
       from stepkey.ledger l
      where l.scope = ${scope} and l.parent_run = ${parent} and l.kind = 'run'
      order by l.created_at, l.key`,
    text.values as never[],
  );
}
