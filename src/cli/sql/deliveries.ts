/**
 * What happened to an enqueued message after its step: the graphile-worker
 * job still waiting under its key (pending, retrying, failed — finished jobs
 * are deleted), and the inbox rows of consumers that applied it.
 *
 * graphile-worker's job key is unique and indexed. The inbox is keyed by
 * (consumer, message_key): consumers are found with a loose index scan over
 * that primary key, then each (consumer, key) pair is one index probe — no
 * index on message_key is needed.
 */
import type { Queryable } from '../../db/connect.js';

export interface JobInfo {
  id: string;
  task: string;
  key: string;
  attempts: number;
  maxAttempts: number;
  status: 'pending' | 'running' | 'retrying' | 'failed';
  lastError: string | null;
  /** Milliseconds since the epoch, like every time the CLI reads. */
  runAt: number;
  lockedBy: string | null;
}

export interface InboxInfo {
  consumer: string;
  messageKey: string;
  processedAt: number;
  expiresAt: number;
}

/** Jobs whose key is one of `keys`; none when graphile-worker's schema is not installed. */
export async function jobsWithKeys(q: Queryable, keys: readonly string[]): Promise<JobInfo[]> {
  if (keys.length === 0) return [];
  const [installed] = await q<{ ok: boolean }[]>`select to_regclass('graphile_worker.jobs') is not null as ok`;
  if (!installed?.ok) return [];
  return q<JobInfo[]>`
    select id::text, task_identifier as task, key, attempts, max_attempts as "maxAttempts",
           case when attempts >= max_attempts then 'failed'
                when locked_by is not null then 'running'
                when attempts > 0 then 'retrying'
                else 'pending' end as status,
           last_error as "lastError", (extract(epoch from run_at) * 1000)::float8 as "runAt", locked_by as "lockedBy"
      from graphile_worker.jobs
     where key in (select value from json_array_elements_text(${JSON.stringify(keys)}::json))
     order by id`;
}

/** Inbox rows whose message key is one of `keys`, in any consumer. */
export async function inboxWithKeys(q: Queryable, keys: readonly string[]): Promise<InboxInfo[]> {
  if (keys.length === 0) return [];
  return q<InboxInfo[]>`
    with recursive consumers(consumer) as (
      (select consumer from stepkey.inbox order by consumer limit 1)
      union all
      select (select i.consumer from stepkey.inbox i where i.consumer > c.consumer order by i.consumer limit 1)
        from consumers c
       where c.consumer is not null
    )
    select found.*
      from consumers c
     cross join (select value as key from json_array_elements_text(${JSON.stringify(keys)}::json)) as wanted
     cross join lateral (
       select consumer, message_key as "messageKey", (extract(epoch from processed_at) * 1000)::float8 as "processedAt",
              (extract(epoch from expires_at) * 1000)::float8 as "expiresAt"
         from stepkey.inbox
        where consumer = c.consumer and message_key = wanted.key
     ) found
     where c.consumer is not null
     order by found."processedAt"`;
}
