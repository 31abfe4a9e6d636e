/**
 * Putting a run on a queue: its entry, in the transaction of its claim. The
 * run itself is parked by the same transaction (status waiting, wait_kind
 * 'slot'), so it holds no lease while it waits; dispatch starts it.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';
import type { EntryValues } from '../../lifecycle/enqueue-grant.js';

export type { EntryValues };

export function insertEntryStatement(q: Queryable, clock: Clock, ref: KeyRef, entry: EntryValues) {
  const now = sqlNow(q, clock);
  return q`
    insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before)
    values (${ref.scope}, ${ref.key}, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
            ${now} + ${entry.delayMs}::float8 * interval '1 millisecond')`;
}
