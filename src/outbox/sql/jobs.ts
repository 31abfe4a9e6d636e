/**
 * What stepkey changes in graphile-worker's job table (0.17); reading it is
 * src/read/sql/jobs.ts.
 *
 * A job fails for good when its attempts reach max_attempts: it stays in the
 * table with its last error, visible, never picked again, until retried by
 * hand. graphile-worker's permanently_fail_jobs skips locked jobs, and a job
 * is locked while its task runs; so a task that meets a permanent failure
 * lowers its own job's max_attempts to the attempts made (the job is locked by
 * this worker, nobody else writes it) and then throws. The max_attempts it had
 * is kept in its payload (the envelope's `m`), for a retry by hand to restore.
 */
import type { Queryable } from '../../db/connect.js';

/**
 * Guarantee: the job is never picked again, and the attempts it was given
 * survive in its payload as `m`. The payload is rebuilt from its own JSON
 * values (json, not jsonb), so the message's payload keeps its exact text:
 * a receiver that compares bodies byte for byte sees the same body on a retry.
 */
export async function failJobForGood(q: Queryable, jobId: string): Promise<void> {
  await q`
    update graphile_worker._private_jobs
       set max_attempts = attempts,
           payload = case when json_typeof(payload) = 'object' then (
             select json_object_agg(e.key, e.value)
               from (select key, value from json_each(payload) where key <> 'm'
                     union all
                     select 'm', to_json(max_attempts)) e)
           else payload end
     where id = ${jobId}::bigint`;
}

/**
 * Retries jobs by hand: attempts reset, due now, and the max_attempts a
 * permanent failure lowered restored from the payload's `m` — so the job gets
 * its full attempts again, not one. Guarantee (as graphile-worker's
 * reschedule_jobs): a locked job — running now — is left alone; only jobs
 * unlocked, or locked for over four hours by a dead worker, are retried.
 * Returns the ids retried.
 */
export async function retryJobs(q: Queryable, ids: readonly string[]): Promise<string[]> {
  const rows = await q<{ id: string }[]>`
    update graphile_worker._private_jobs
       set run_at = now(),
           attempts = 0,
           max_attempts = case when json_typeof(payload) = 'object' and (payload->>'m') ~ '^[1-9][0-9]{0,4}$'
                               then least((payload->>'m')::int, 32767)::smallint
                               else max_attempts end,
           updated_at = now()
     where id in (select value::bigint from json_array_elements_text(${JSON.stringify(ids)}::json))
       and (locked_at is null or locked_at < now() - interval '4 hours')
    returning id::text`;
  return rows.map((row) => row.id);
}
