/**
 * What stepkey reads and changes in graphile-worker's job table (0.17).
 *
 * A job fails for good when its attempts reach max_attempts: it stays in the
 * table with its last error, visible, never picked again, until retried by
 * hand. graphile-worker's permanently_fail_jobs skips locked jobs, and a job
 * is locked while its task runs; so a task that meets a permanent failure
 * lowers its own job's max_attempts to the attempts made (the job is locked by
 * this worker, nobody else writes it) and then throws.
 */
import type { Queryable } from '../../db/connect.js';

export async function failJobForGood(q: Queryable, jobId: string): Promise<void> {
  await q`update graphile_worker._private_jobs set max_attempts = attempts where id = ${jobId}::bigint`;
}

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
  status: 'pending' | 'running' | 'retrying' | 'failed';
}

/** Jobs of stepkey effects, failed ones first. */
export function listJobs(q: Queryable, options: { status?: JobRow['status']; limit?: number } = {}) {
  return q<JobRow[]>`
    select * from (
      select id::text, task_identifier as task, key, attempts, max_attempts as "maxAttempts",
             last_error as "lastError", (extract(epoch from run_at) * 1000)::float8 as "runAt", locked_by as "lockedBy",
             case when attempts >= max_attempts then 'failed'
                  when locked_by is not null then 'running'
                  when attempts > 0 then 'retrying'
                  else 'pending' end as status
        from graphile_worker.jobs
    ) j
    where ${options.status ?? null}::text is null or j.status = ${options.status ?? null}::text
    order by (j.status = 'failed') desc, j.id
    limit ${options.limit ?? 100}`;
}

/** Retries failed jobs by hand: attempts reset, due now. Returns the ids retried. */
export async function retryJobs(q: Queryable, ids: readonly string[]): Promise<string[]> {
  const rows = await q<{ id: string }[]>`
    select id::text from graphile_worker.reschedule_jobs(
      array(select value::bigint from json_array_elements_text(${JSON.stringify(ids)}::json)),
      run_at => now(), attempts => 0)`;
  return rows.map((row) => row.id);
}
