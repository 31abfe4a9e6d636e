/**
 * Putting a run on a queue: its entry, in the transaction of its claim. The
 * run itself is parked by the same transaction (status waiting, wait_kind
 * 'slot'), so it holds no lease while it waits; dispatch starts it — unless
 * the entry was granted its slot at once (grantedAtOnce below), and the run
 * executes under its claim's lease.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow, sqlStatementNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';
import { servedUpsert } from '../../lifecycle/dispatch.js';

export interface EntryValues {
  queue: string;
  partition: string;
  priority: number;
  delayMs: number;
}

export function insertEntryStatement(q: Queryable, clock: Clock, ref: KeyRef, entry: EntryValues, claimedHere?: string) {
  const now = sqlNow(q, clock);
  if (claimedHere !== undefined) {
    // Sent with the claim that inserted the run (flow/enqueue.ts): only if it did, under lease token
    // `claimedHere`; its slot granted at once when grantedAtOnce says so (then it is not parked: the
    // claim's lease is its start).
    return q`
      with entry as (
        insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before, holding, granted_at, granted_token)
        select l.scope, l.key, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
               ${now} + ${entry.delayMs}::float8 * interval '1 millisecond',
               g.at_once, case when g.at_once then ${now} end, case when g.at_once then l.lease_token end
          from stepkey.ledger l
          cross join lateral (select ${grantedAtOnce(q, entry, sqlStatementNow(q, clock))} as at_once) g
         where l.scope = ${ref.scope} and l.key = ${ref.key} and l.lease_token = ${claimedHere}::uuid and l.status = 'in_progress'
        returning holding, partition
      ), served as (
        ${servedUpsert(q, entry.queue, now, q`(select partition from entry where holding) granted`)}
      )
      select holding from entry`;
  }
  return q`
    insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before)
    values (${ref.scope}, ${ref.key}, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
            ${now} + ${entry.delayMs}::float8 * interval '1 millisecond')`;
}

/**
 * Whether an enqueue grants its own run a slot at once, in its entry's
 * statement: only under both of the queue's locks (taken by the enqueue's
 * lock statement, noted in stepkey.dispatching, this statement's snapshot
 * taken after them, so it sees every slot granted before), with no delay,
 * on a queue without a rate, when no run is due in line before it (by the
 * statement's time, read after the wait for the lock: the dispatch would
 * choose that one first) and a slot — of the queue and of the
 * run's partition — is free. The same guarantee as a dispatch's: slots held
 * never exceed the settings on the queue's row.
 */
function grantedAtOnce(q: Queryable, entry: EntryValues, now: ReturnType<typeof sqlStatementNow>) {
  if (entry.delayMs > 0) return q`false`;
  return q`
    current_setting('stepkey.dispatching', true) is not distinct from ${entry.queue}::text
    and exists (
      select 1 from stepkey.queues s
       where s.name = ${entry.queue} and s.rate_limit is null
         and (select count(*) from stepkey.queue_entries h where h.queue = ${entry.queue} and h.holding) < s.concurrency
         and (s.per_partition is null
              or (select count(*) from stepkey.queue_entries h
                   where h.queue = ${entry.queue} and h.partition = ${entry.partition} and h.holding) < s.per_partition))
    and not exists (
      select 1 from stepkey.queue_entries w
       where w.queue = ${entry.queue} and not w.holding and not w.failed and w.not_before <= ${now})`;
}
