/**
 * Putting a run on a queue: its entry, in the transaction of its claim. The
 * run itself is parked by the same transaction (status waiting, wait_kind
 * 'slot'; on one PostgreSQL in the entry's own statement), so it holds no
 * lease while it waits; dispatch starts it — unless the entry was granted its
 * slot at once (grantedAtOnce below), and the run executes under its claim's
 * lease.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';
import { servedUpsert } from '../../lifecycle/dispatch.js';
import { parkSet } from '../../lifecycle/park.js';
import { slotWait } from '../../lifecycle/slot-wait.js';

export interface EntryValues {
  queue: string;
  partition: string;
  priority: number;
  delayMs: number;
}

export function insertEntryStatement(q: Queryable, clock: Clock, ref: KeyRef, entry: EntryValues, claimedHere?: string, behindBacklog = false) {
  const now = sqlNow(q, clock);
  if (claimedHere !== undefined) {
    // Sent with the claim that inserted the run (flow/enqueue.ts): only if it did, under lease token
    // `claimedHere`; its slot granted at once when grantedAtOnce says so (then it is not parked: the
    // claim's lease is its start), parked for a slot if not. Nothing to fence: no one else can have
    // touched a row this transaction inserted.
    return q`
      with entry as (
        insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before, holding, granted_at, granted_token)
        select l.scope, l.key, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
               ${now} + ${entry.delayMs}::float8 * interval '1 millisecond',
               g.at_once, case when g.at_once then ${now} end, case when g.at_once then l.lease_token end
          from stepkey.ledger l
          -- Lateral on the run's row (the reference to l): decided only for the run this claim
          -- inserted, never for a duplicate's (the function takes the queue's locks).
          cross join lateral (select case when l.status = 'in_progress' then ${grantedAtOnce(q, clock, entry, behindBacklog)} else false end as at_once) g
         where l.scope = ${ref.scope} and l.key = ${ref.key} and l.lease_token = ${claimedHere}::uuid and l.status = 'in_progress'
        returning holding, partition
      ), served as (
        ${servedUpsert(q, entry.queue, now, q`(select partition from entry where holding) granted`)}
      ), parked as (
        update stepkey.ledger
           set ${parkSet((strings, ...values) => q(strings, ...(values as never[])), now, slotWait(entry.queue))}
         where scope = ${ref.scope} and key = ${ref.key} and lease_token = ${claimedHere}::uuid and status = 'in_progress'
           and exists (select 1 from entry where not holding)
      )
      -- Read after the entry's insert: whether stepkey.slot_at_once took the queue's locks.
      select holding, current_setting('stepkey.dispatching', true) is not distinct from ${entry.queue}::text as locked from entry`;
  }
  return q`
    insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before)
    values (${ref.scope}, ${ref.key}, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
            ${now} + ${entry.delayMs}::float8 * interval '1 millisecond')`;
}

/**
 * Whether an enqueue grants its own run a slot at once, in its entry's
 * statement: decided by stepkey.slot_at_once (migration 0018), which takes
 * the queue's locks if a slot seemed free and then reads, in snapshots of its
 * own taken after them, whether a slot of the queue and of the partition is
 * free and no run is due in line before it. Never with a delay, nor behind
 * a backlog its process saw (EnqueueRequest.behindBacklog): then no lock.
 */
function grantedAtOnce(q: Queryable, clock: Clock, entry: EntryValues, behindBacklog: boolean) {
  if (entry.delayMs > 0 || behindBacklog) return q`false`;
  return q`stepkey.slot_at_once(${entry.queue}::text, ${entry.partition}::text, ${clock.offsetMs}::float8)`;
}
