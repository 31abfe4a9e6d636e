/**
 * A slot granted at enqueue: the entry of a run that an enqueue's claim has
 * just inserted (running, under the claim's lease) is written holding a
 * slot when the queue has room for it and no run waits in line, and the run
 * goes on under its claim's lease — no park, no dispatch, no second start.
 * Otherwise the entry waits in line, and the park that follows in the same
 * transaction (park.ts, unlessGranted) makes the run wait for a slot, as a
 * dispatch (dispatch.ts) then finds it.
 *
 * Sent after enqueueLockStatement (dispatch.ts), in the same batch: the
 * grant is made only if that statement took the queue's lock exclusively
 * (and then this one takes the queue row's), and this statement's
 * snapshot, taken after it, sees every slot granted before.
 * Guarantee: as a dispatch's, slots held never exceed the queue's
 * concurrency, its partition's or its bucket; and a run granted here never
 * passes one waiting in line — it is granted only when no run waits ready
 * in the queue (one parked for a timer that is not due does not wait).
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { Lease } from '../ledger/types.js';
import { bucketTokens, servedUpsert } from './dispatch.js';

export interface EntryValues {
  queue: string;
  partition: string;
  priority: number;
  delayMs: number;
}

/**
 * What the grant answers: `entered`, whether the claim's row was there (its
 * entry written); `granted`, a slot held; `locked`, the queue's lock held;
 * `room`, a slot seemed free; `ahead`, a run waits ready in line.
 */
export interface EntryGrant {
  entered: boolean;
  granted: boolean;
  locked: boolean;
  room: boolean;
  ahead: boolean;
}

export function enqueueGrantStatement(q: Queryable, clock: Clock, lease: Lease, entry: EntryValues) {
  const now = sqlNow(q, clock);
  return q<EntryGrant[]>`
    with settings as (
      select concurrency, per_partition, rate_limit, ${bucketTokens(q, now)} as tokens
        from stepkey.queues where name = ${entry.queue}
    ), held as (
      select count(*) as n, count(*) filter (where partition = ${entry.partition}) as in_partition
        from stepkey.queue_entries where queue = ${entry.queue} and holding
    ), seen as (
      select current_setting('stepkey.dispatching', true) is not distinct from ${entry.queue}::text as locked,
             h.n < s.concurrency as room,
             -- A run ready in line (each entry's run probed by its key, as a dispatch probes it).
             exists (select 1 from stepkey.queue_entries e
                      cross join lateral (
                        select l.status, l.wait_kind, l.wake_at from stepkey.ledger l
                         where l.scope = e.scope and l.key = e.key
                        offset 0) l
                      where e.queue = ${entry.queue} and not e.holding and not e.failed and e.not_before <= ${now}
                        and l.status = 'waiting' and (l.wait_kind = 'slot' or l.wake_at <= ${now})) as ahead,
             ${entry.delayMs}::float8 <= 0
               and (s.per_partition is null or h.in_partition < s.per_partition)
               and (s.tokens is null or s.tokens >= 1) as eligible
        -- No queue row (deleted under a running engine): a null grant, which the entry's NOT NULL refuses.
        from held h left join settings s on true
    ), decided as (
      select locked, room, ahead, locked and room and not ahead and eligible as granted from seen
    ), row_locked as (
      -- A grant takes the queue row's lock too, as every dispatch does.
      select 1 from stepkey.queues
       where name = ${entry.queue} and current_setting('stepkey.dispatching', true) is not distinct from ${entry.queue}::text
         for update
    ), entered as (
      insert into stepkey.queue_entries (scope, key, queue, partition, priority, enqueued_at, not_before, holding, granted_at, granted_token)
      select l.scope, l.key, ${entry.queue}, ${entry.partition}, ${entry.priority}, ${now},
             ${now} + ${entry.delayMs}::float8 * interval '1 millisecond',
             d.granted, case when d.granted then ${now} end, case when d.granted then l.lease_token end
        from stepkey.ledger l, decided d
       where l.scope = ${lease.scope} and l.key = ${lease.key} and l.lease_token = ${lease.token}::uuid and l.status = 'in_progress'
      returning holding, partition
    ), granted as (
      select partition from entered where holding
    ), served as (
      ${servedUpsert(q, entry.queue, now, q`granted`)}
    ), spent as (
      update stepkey.queues
         set tokens = s.tokens - 1, refilled_at = greatest(refilled_at, ${now})
        from settings s
       where queues.name = ${entry.queue} and s.rate_limit is not null and exists (select 1 from granted)
    )
    select exists (select 1 from entered) as entered, exists (select 1 from granted) as granted, d.locked, d.room, d.ahead,
           exists (select 1 from row_locked) as row_locked
      from decided d`;
}
