/**
 * The step limits read model: per limit and partition, its settings, the
 * slots held, the runs parked waiting for it, and the tokens and slots
 * granted so far (two readings apart give the recent rate). One statement;
 * the waiters are counted on ledger_limit_waiters_idx.
 */
import type { Queryable } from '../../db/connect.js';
import { assertStorableText } from '../../keys/validate.js';

export interface LimitPartitionRow {
  limit: string;
  /** '' for a limit without partitions. */
  partition: string;
  concurrency: number | null;
  rateLimit: string | null;
  held: number;
  waiting: number;
  /** Tokens and slots granted to the partition since it was first used. */
  granted: number;
  /** The rate bucket's tokens now (below zero: reserved by waiting runs); null without a rate. */
  tokens: number | null;
}

export async function listLimits(q: Queryable, options: { limit?: string } = {}): Promise<LimitPartitionRow[]> {
  if (options.limit !== undefined) assertStorableText(options.limit, "The 'limit' filter");
  const only = options.limit ?? null;
  const rows = await q<LimitPartitionRow[]>`
    select l.name as limit, coalesce(p.partition, '') as partition, l.concurrency,
           case when l.rate_limit is null then null else l.rate_limit || '/' || l.rate_period_ms || 'ms' end as "rateLimit",
           coalesce(p.held, 0) as held,
           (select count(*)::int from stepkey.ledger w
             where w.status = 'waiting' and w.wait_kind = 'limit'
               and w.wait_for = stepkey.limit_wait_for(l.name, coalesce(p.partition, ''))) as waiting,
           coalesce(p.granted, 0)::float8 as granted,
           case when l.rate_limit is null then null
                else least(l.rate_limit::float8, coalesce(p.tokens, l.rate_limit::float8)
                           + greatest(0, extract(epoch from now() - coalesce(p.refilled_at, now())) * 1000) * l.rate_limit / l.rate_period_ms)
           end as tokens
      from stepkey.limits l
      left join stepkey.limit_partitions p on p.limit_name = l.name
     where ${only}::text is null or l.name = ${only}::text
     order by l.name, coalesce(p.held, 0) desc, p.partition`;
  return [...rows];
}
