/**
 * Writing queue settings to their rows. The engine writes the settings of
 * every queue it registers when it starts (the newest release to start wins);
 * dispatch reads them from the row, never from memory, so every process
 * enforces the same concurrency while two releases run side by side.
 */
import type { Queryable } from '../../db/connect.js';
import type { Queue } from '../define-queue.js';

export async function writeQueueSettings(q: Queryable, list: readonly Queue[]): Promise<void> {
  if (list.length === 0) return;
  const rows = list.map((queue) => ({
    name: queue.name,
    concurrency: queue.concurrency,
    per_partition: queue.perPartition,
    rate_limit: queue.rateLimit?.limit ?? null,
    rate_period_ms: queue.rateLimit?.periodMs ?? null,
  }));
  // A bucket keeps its tokens across a change of settings, capped at the new size.
  await q`
    insert into stepkey.queues as queues (name, concurrency, per_partition, rate_limit, rate_period_ms, tokens, refilled_at, written_at)
    select s.name, s.concurrency, s.per_partition, s.rate_limit, s.rate_period_ms, s.rate_limit::float8, now(), now()
      from json_to_recordset(${JSON.stringify(rows)}::json)
           as s(name text, concurrency int, per_partition int, rate_limit int, rate_period_ms int)
    on conflict (name) do update
       set concurrency = excluded.concurrency,
           per_partition = excluded.per_partition,
           rate_limit = excluded.rate_limit,
           rate_period_ms = excluded.rate_period_ms,
           tokens = least(coalesce(queues.tokens, excluded.tokens), excluded.tokens),
           refilled_at = coalesce(queues.refilled_at, excluded.refilled_at),
           written_at = now()`;
}
