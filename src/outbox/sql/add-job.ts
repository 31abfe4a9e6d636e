/**
 * The outbox write: a graphile-worker job added inside the caller's
 * transaction, so it exists exactly when that transaction commits.
 *
 * job_key is the message's derived key with 'unsafe_dedupe': a second add of
 * the same key while the job is pending changes nothing. That is a safety net
 * only — graphile-worker deletes finished jobs, freeing their key — the ledger
 * row written in the same transaction is what makes the enqueue exactly-once.
 * The payload goes as ::json text (add_job takes json, not jsonb).
 */
import type { Queryable } from '../../db/connect.js';
import type { Effect } from '../effect.js';

export function addJobStatement(q: Queryable, effect: Effect, key: string, envelope: string) {
  return q`
    select id from graphile_worker.add_job(
      identifier => ${effect.name}::text,
      payload => ${envelope}::json,
      queue_name => ${effect.queue ?? null}::text,
      max_attempts => ${effect.maxAttempts}::int,
      job_key => ${key}::text,
      job_key_mode => 'unsafe_dedupe')`;
}
