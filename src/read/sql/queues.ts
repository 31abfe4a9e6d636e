/**
 * The queues read model: per queue (every one an engine registered) and
 * partition, the runs waiting for a slot (not those that failed: they wait
 * for a resume), the slots held, and the slots granted so far (a counter
 * that two readings apart give the recent rate of starts). One statement.
 */
import type { Queryable } from '../../db/connect.js';
import { assertStorableText } from '../../keys/validate.js';

export interface QueuePartitionRow {
  queue: string;
  /** '' for a queue without partitions, or one no run was put on yet. */
  partition: string;
  concurrency: number;
  perPartition: number | null;
  rateLimit: string | null;
  waiting: number;
  running: number;
  /** Slots granted to the partition since the queue was created. */
  served: number;
  lastServedAt: string | null;
}

export async function listQueues(q: Queryable, options: { queue?: string } = {}): Promise<QueuePartitionRow[]> {
  if (options.queue !== undefined) assertStorableText(options.queue, "The 'queue' filter");
  const rows = await q<QueuePartitionRow[]>`
    with entries as (
      select queue, partition, count(*) filter (where not holding and not failed)::int as waiting, count(*) filter (where holding)::int as running
        from stepkey.queue_entries
       where ${options.queue ?? null}::text is null or queue = ${options.queue ?? null}::text
       group by queue, partition
    ), served as (
      select queue, partition from entries
      union
      select queue, partition from stepkey.queue_partitions
       where ${options.queue ?? null}::text is null or queue = ${options.queue ?? null}::text
    ), parts as (
      -- A queue that no run has been put on yet is listed too, as one empty partition.
      select queue, partition from served
      union all
      select name, '' from stepkey.queues q
       where (${options.queue ?? null}::text is null or name = ${options.queue ?? null}::text)
         and not exists (select 1 from served s where s.queue = q.name)
    )
    select p.queue, p.partition, q.concurrency, q.per_partition as "perPartition",
           case when q.rate_limit is null then null else q.rate_limit || '/' || q.rate_period_ms || 'ms' end as "rateLimit",
           coalesce(e.waiting, 0) as waiting, coalesce(e.running, 0) as running,
           coalesce(s.served, 0)::float8 as served, s.last_served_at::text as "lastServedAt"
      from parts p
      join stepkey.queues q on q.name = p.queue
      left join entries e on e.queue = p.queue and e.partition = p.partition
      left join stepkey.queue_partitions s on s.queue = p.queue and s.partition = p.partition
     order by p.queue, coalesce(e.waiting, 0) + coalesce(e.running, 0) desc, p.partition`;
  return [...rows];
}
