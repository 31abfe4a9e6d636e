/**
 * Writing limit settings to their rows. The engine writes the settings of
 * every limit it registers before its first step takes from one (the newest
 * release to start wins); acquire reads them from the row, never from memory,
 * so every process enforces the same rate and concurrency while two releases
 * run side by side. A partition's bucket keeps its tokens across a change
 * (capped at the new size by the next acquire).
 */
import type { Queryable } from '../../db/connect.js';
import type { Limit } from '../define-limit.js';

export async function writeLimitSettings(q: Queryable, list: readonly Limit[]): Promise<void> {
  if (list.length === 0) return;
  const rows = list.map((limit) => ({
    name: limit.name,
    concurrency: limit.concurrency,
    rate_limit: limit.rateLimit?.limit ?? null,
    rate_period_ms: limit.rateLimit?.periodMs ?? null,
  }));
  await q`
    insert into stepkey.limits as limits (name, concurrency, rate_limit, rate_period_ms, written_at)
    select s.name, s.concurrency, s.rate_limit, s.rate_period_ms, now()
      from json_to_recordset(${JSON.stringify(rows)}::json) as s(name text, concurrency int, rate_limit int, rate_period_ms int)
    on conflict (name) do update
       set concurrency = excluded.concurrency,
           rate_limit = excluded.rate_limit,
           rate_period_ms = excluded.rate_period_ms,
           written_at = now()`;
}
