/**
 * The consumer's inbox: one row per (consumer, message key) it has applied,
 * written in the same transaction as the effect's own work.
 *
 * Guarantee: the row and the work commit together or not at all, and a
 * message whose row exists is never applied again. Two deliveries of one
 * message at once: the second insert waits for the first transaction and then
 * finds the row (DO NOTHING, no row returned) — it does not apply twice.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';

export function claimInboxStatement(q: Queryable, clock: Clock, consumer: string, key: string, retentionMs: number) {
  const now = sqlNow(q, clock);
  return q<{ fresh: boolean }[]>`
    insert into stepkey.inbox (consumer, message_key, processed_at, expires_at)
    values (${consumer}, ${key}, ${now}, ${now} + ${retentionMs}::float8 * interval '1 millisecond')
    on conflict (consumer, message_key) do nothing
    returning true as fresh`;
}

/** Forgets inbox rows past their retention, a batch at a time. */
export async function purgeInbox(q: Queryable, clock: Clock, batchSize: number): Promise<number> {
  const now = sqlNow(q, clock);
  const rows = await q`
    delete from stepkey.inbox i
     using (select consumer, message_key from stepkey.inbox
             where expires_at <= ${now}
             order by expires_at
             limit ${batchSize}
             for update skip locked) d
     where i.consumer = d.consumer and i.message_key = d.message_key
    returning 1`;
  return rows.length;
}
