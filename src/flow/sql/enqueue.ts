/**
 * Putting a run on a queue: its entry, in the transaction of its claim. The
 * run itself is parked by the same transaction (status waiting, wait_kind
 * 'slot'), so it holds no lease while it waits; dispatch starts it.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';

export interface EntryValues {
  queue: string;
  partition: string;
  priority: number;
  delayMs: number;
}

export function insertEntryStatement(q: Queryable, clock: Clock, ref: KeyRef, entry: EntryValues, claimedHere?: string) {
  const now = sqlNow(q, clock);
  if (claimedHere !== undefined) {
    // Sent with the claim that inserted the run (flow/enqueue.ts): only if it did, under lease token `claimedHere`.
    return q`
      insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before)
      select l.scope, l.key, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
             ${now} + ${entry.delayMs}::float8 * interval '1 millisecond'
        from stepkey.ledger l
       where l.scope = ${ref.scope} and l.key = ${ref.key} and l.lease_token = ${claimedHere}::uuid and l.status = 'in_progress'`;
  }
  return q`
    insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before)
    values (${ref.scope}, ${ref.key}, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
            ${now} + ${entry.delayMs}::float8 * interval '1 millisecond')`;
}
