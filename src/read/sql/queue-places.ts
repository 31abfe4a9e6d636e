/**
 * A run's place in its queue, for `stepkey runs`, `stepkey inspect`,
 * `engine.get()` and the dashboard: its queue, partition and priority,
 * whether it holds a slot, and — waiting for one — its position in its
 * partition's line.
 *
 * The position follows dispatch's order within a partition exactly
 * (src/lifecycle/dispatch.ts: priority, higher first, then first enqueued
 * first): 1 + the entries of the same queue and partition, not holding a
 * slot, with a higher priority, or the same priority and an earlier
 * enqueue. Entries ahead that are not due yet (a delay, a parked wait) are
 * counted: dispatch passes over them only while they are not due. Across
 * partitions dispatch takes turns (round-robin), so a run's place in the
 * whole queue is not a fixed number; `queueWaiting` says how many wait in
 * all.
 *
 * Computed only for the runs asked for (a page's rows). On one PostgreSQL in
 * one statement: two index ranges of queue_entries_waiting_idx per run. On
 * Citus, which refuses a correlated count across shards, their entries in one
 * statement, then one uncorrelated count over the queue's waiting entries per
 * entry.
 */
import type { Queryable } from '../../db/connect.js';
import type { KeyRef } from '../../ledger/types.js';
import { tablesDistributed } from '../../db/citus.js';

export interface QueuePlace {
  queue: string;
  /** '' for a queue without partitions. */
  partition: string;
  priority: number;
  /** Holds a slot (running, or ending); false: waiting for one. */
  holding: boolean;
  /** 1 = next in its partition's line; null while it holds a slot. */
  position: number | null;
  /** Runs waiting for a slot in its partition, itself included. */
  partitionWaiting: number;
  /** Runs waiting for a slot in the whole queue. */
  queueWaiting: number;
  /** Milliseconds since the epoch. */
  enqueuedAt: number;
  /** Not started before this (a delayed enqueue). */
  notBefore: number;
}

const idOf = (ref: KeyRef) => `${ref.scope}\u0000${ref.key}`;

/** The queue places of the runs in `refs` that are on a queue, by `scope\u0000key`. */
export async function queuePlaces(q: Queryable, refs: readonly KeyRef[]): Promise<Map<string, QueuePlace>> {
  const places = new Map<string, QueuePlace>();
  if (refs.length === 0) return places;
  if (!(await tablesDistributed(q))) {
    for (const { scope, key, ...place } of await placesStatement(q, refs)) places.set(idOf({ scope, key }), place);
    return places;
  }
  const entries = await q<(KeyRef & Omit<QueuePlace, 'position' | 'partitionWaiting' | 'queueWaiting'> & { seq: string })[]>`
    select e.scope, e.key, e.queue, e.partition, e.priority, e.holding, e.seq::text as seq,
           (extract(epoch from e.enqueued_at) * 1000)::float8 as "enqueuedAt",
           (extract(epoch from e.not_before) * 1000)::float8 as "notBefore"
      from stepkey.queue_entries e
      join unnest(${refs.map((ref) => ref.scope)}::text[], ${refs.map((ref) => ref.key)}::text[]) as r(scope, key)
        on e.scope = r.scope and e.key = r.key`;
  // The lines are counted per entry, uncorrelated: a queue's line spans scopes (on Citus, every
  // shard), and a correlated count across shards is refused there.
  for (const { scope, key, seq, ...entry } of entries) {
    const [line] = await q<{ ahead: number; partitionWaiting: number; queueWaiting: number }[]>`
      select (count(*) filter (where partition = ${entry.partition}
                                 and (priority > ${entry.priority} or (priority = ${entry.priority} and seq < ${seq}::bigint))))::int as ahead,
             (count(*) filter (where partition = ${entry.partition}))::int as "partitionWaiting",
             count(*)::int as "queueWaiting"
        from stepkey.queue_entries
       where queue = ${entry.queue} and not holding`;
    places.set(idOf({ scope, key }), {
      ...entry,
      position: entry.holding ? null : 1 + (line?.ahead ?? 0),
      partitionWaiting: line?.partitionWaiting ?? 0,
      queueWaiting: line?.queueWaiting ?? 0,
    });
  }
  return places;
}

/** The places of `refs` in one statement (one PostgreSQL). */
function placesStatement(q: Queryable, refs: readonly KeyRef[]) {
  return q<(QueuePlace & KeyRef)[]>`
    with e as (
      select e.* from unnest(${refs.map((ref) => ref.scope)}::text[], ${refs.map((ref) => ref.key)}::text[]) as r(scope, key)
        join stepkey.queue_entries e on e.scope = r.scope and e.key = r.key
    ), partitions as (
      -- Each partition shown counted once, however many of its runs are shown.
      select p.queue, p.partition,
             (select count(*) from stepkey.queue_entries a
               where a.queue = p.queue and a.partition = p.partition and not a.holding)::int as waiting
        from (select distinct queue, partition from e) p
    ), queues as (
      select d.queue, (select count(*) from stepkey.queue_entries a where a.queue = d.queue and not a.holding)::int as waiting
        from (select distinct queue from e) d
    )
    select e.scope, e.key, e.queue, e.partition, e.priority, e.holding,
           case when e.holding then null
                else 1 + (select count(*) from stepkey.queue_entries a
                           where a.queue = e.queue and a.partition = e.partition and not a.holding
                             and a.priority > e.priority)::int
                       + (select count(*) from stepkey.queue_entries a
                           where a.queue = e.queue and a.partition = e.partition and not a.holding
                             and a.priority = e.priority and a.seq < e.seq)::int
           end as position,
           p.waiting as "partitionWaiting", d.waiting as "queueWaiting",
           (extract(epoch from e.enqueued_at) * 1000)::float8 as "enqueuedAt",
           (extract(epoch from e.not_before) * 1000)::float8 as "notBefore"
      from e
      join partitions p on p.queue = e.queue and p.partition = e.partition
      join queues d on d.queue = e.queue`;
}

/** The place of one run, or undefined when it is on no queue. */
export async function queuePlace(q: Queryable, ref: KeyRef): Promise<QueuePlace | undefined> {
  return (await queuePlaces(q, [ref])).get(idOf(ref));
}

export const queuePlaceId = idOf;
