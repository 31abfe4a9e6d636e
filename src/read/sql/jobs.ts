/**
 * The outbox as operators see it: stepkey's jobs in graphile-worker's table
 * (0.17), failed ones first, and the figures the metrics and the dashboard
 * show (jobs by status, the age of the oldest job due and not taken).
 *
 * A job's status: running while a worker holds it (even on its last
 * attempt: graphile-worker counts an attempt when it takes the job); failed
 * for good once its attempts reached max_attempts — it stays, visible, never
 * picked again until retried by hand; retrying after a failed attempt;
 * pending otherwise. Finished jobs are deleted by graphile-worker.
 */
import type { Queryable } from '../../db/connect.js';

export type JobStatus = 'pending' | 'running' | 'retrying' | 'failed';

export const jobStatuses: readonly JobStatus[] = ['failed', 'retrying', 'pending', 'running'];

export interface JobRow {
  id: string;
  task: string;
  key: string | null;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  /** When it runs next (milliseconds since the epoch). */
  runAt: number;
  lockedBy: string | null;
  status: JobStatus;
}

/** The columns of a job, over graphile_worker.jobs `j`. */
export const jobColumns = `
  j.id::text as id, j.task_identifier as task, j.key, j.attempts, j.max_attempts as "maxAttempts",
  j.last_error as "lastError", (extract(epoch from j.run_at) * 1000)::float8 as "runAt", j.locked_by as "lockedBy",
  case when j.locked_by is not null then 'running'
       when j.attempts >= j.max_attempts then 'failed'
       when j.attempts > 0 then 'retrying'
       else 'pending' end as status`;

const installed = new WeakMap<object, Promise<boolean>>();

/** Whether graphile-worker's schema is installed (remembered once it is). */
export function graphileInstalled(q: Queryable): Promise<boolean> {
  let known = installed.get(q);
  if (!known) {
    known = q<{ ok: boolean }[]>`select to_regclass('graphile_worker.jobs') is not null as ok`.then((rows) => rows[0]?.ok === true);
    installed.set(q, known);
    void known.then((ok) => ok || installed.delete(q), () => installed.delete(q));
  }
  return known;
}

/** Jobs of stepkey effects, failed ones first. */
export function listJobs(q: Queryable, options: { status?: JobStatus; limit?: number } = {}) {
  return q.unsafe<JobRow[]>(
    `select * from (select ${jobColumns} from graphile_worker.jobs j) j
      where $1::text is null or j.status = $1::text
      order by (j.status = 'failed') desc, j.id::bigint
      limit $2`,
    [options.status ?? null, options.limit ?? 100] as never[],
  );
}

export interface OutboxFigures {
  /** Jobs by status. */
  counts: Record<JobStatus, number>;
  /** How long the oldest job that is due, not failed and not taken has waited (0: none). */
  oldestPendingMs: number;
}

/** The outbox's figures in one statement: one pass over the job table (it holds unfinished jobs only). */
export async function outboxFigures(q: Queryable): Promise<OutboxFigures> {
  if (!(await graphileInstalled(q))) return { counts: { pending: 0, running: 0, retrying: 0, failed: 0 }, oldestPendingMs: 0 };
  const [row] = await q<(Record<JobStatus, number> & { oldestPendingMs: number })[]>`
    select count(*) filter (where locked_by is null and attempts = 0)::int as pending,
           count(*) filter (where locked_by is not null)::int as running,
           count(*) filter (where locked_by is null and attempts > 0 and attempts < max_attempts)::int as retrying,
           count(*) filter (where locked_by is null and attempts >= max_attempts)::int as failed,
           coalesce((extract(epoch from now() - min(run_at) filter (
             where locked_by is null and attempts < max_attempts and run_at <= now())) * 1000)::float8, 0) as "oldestPendingMs"
      from graphile_worker.jobs`;
  const { oldestPendingMs, ...counts } = row!;
  return { counts, oldestPendingMs };
}
