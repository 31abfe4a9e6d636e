/**
 * Leases of running runs: heartbeats, release on shutdown, and the sweeper
 * that takes over runs whose process died and parked runs that are due.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef, Lease } from '../ledger/types.js';
import { queuedWithoutSlot } from './queued.js';

/**
 * Extends every lease this process holds, in one statement. Returns the ones
 * still held; a lease missing from the answer was taken over or cancelled.
 */
export async function heartbeatRuns(q: Queryable, clock: Clock, leases: readonly Lease[], leaseMs: number) {
  const now = sqlNow(q, clock);
  return q<{ scope: string; key: string }[]>`
    update stepkey.ledger l
       set locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond'
      from json_to_recordset(${JSON.stringify(leases)}::json) as h(scope text, key text, token uuid)
     where l.scope = h.scope and l.key = h.key and l.lease_token = h.token and l.status = 'in_progress'
    returning l.scope, l.key`;
}

/** Ends a lease now (graceful shutdown), so that any worker's sweeper resumes the run at once. */
export async function expireRunLease(q: Queryable, clock: Clock, lease: Lease): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set locked_until = ${now}
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress'
    returning 1`;
  return rows.length === 1;
}

export interface SweptRun {
  scope: string;
  key: string;
  token: string;
  attempts: number;
  /** A parked run that was due (not a lease that expired). */
  woken?: boolean;
  /** The queue whose slot the run holds (a takeover keeps it), or null. */
  queue: string | null;
}

/**
 * The sweeper's takeover: runs whose lease expired, and parked runs that are
 * due, get a new lease token and belong to this process. Guarantee: each
 * goes to exactly one sweeper — rows another sweeper is taking are skipped
 * (SKIP LOCKED), and the new token fences out the process that died (or
 * stalled) holding the old one. A woken run keeps its wait columns: the
 * waiting step reads them when the run reaches it again. Failed runs are not
 * touched: they resume when their caller retries. A run on a queue that
 * has no slot is left to the queue's dispatch (src/flow). Only runs of a
 * workflow version in `versions` are taken: during a deploy, a process of the
 * old release leaves the new release's runs to the processes that run them.
 */
export async function sweepExpiredRuns(
  q: Queryable,
  clock: Clock,
  limit: number,
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
) {
  const now = sqlNow(q, clock);
  const registered = JSON.stringify(versions);
  return q<SweptRun[]>`
    with expired as (
      select scope, key
        from stepkey.ledger
       where kind = 'run' and status = 'in_progress' and locked_until <= ${now}
         and exists (select 1 from json_to_recordset(${registered}::json) as v(name text, version int)
                      where v.name = ledger.name and v.version = ledger.version)
       order by locked_until
       limit ${limit}
       for update skip locked
    ), due as (
      select scope, key
        from stepkey.ledger
       where status = 'waiting' and wake_at <= ${now} and not ${queuedWithoutSlot(q, 'ledger')}
         and exists (select 1 from json_to_recordset(${registered}::json) as v(name text, version int)
                      where v.name = ledger.name and v.version = ledger.version)
       order by wake_at
       limit ${limit}
       for update skip locked
    ), taken as (
      select scope, key, false as woken from expired
      union all
      select scope, key, true from due
      limit ${limit}
    )
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = gen_random_uuid(),
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = l.attempts + case when t.woken then 0 else 1 end,
           updated_at = ${now}
      from taken t
     where l.scope = t.scope and l.key = t.key
    returning l.scope, l.key, l.lease_token::text as token, l.attempts, t.woken,
              (select e.queue from stepkey.queue_entries e where e.scope = l.scope and e.key = l.key and e.holding) as queue`;
}

/** A parked run, as a timer's wake that took nothing finds it (see waits/wake-timers.ts). */
export interface StillParked {
  /** How long until it is due by the database's clock (≤ 0: due). */
  due_in_ms: number | null;
  /** The queue it waits on without a slot: only that queue's dispatch starts it. */
  queue: string | null;
}

/** The run, if it is still parked: when it is due and whether a queue holds it (one read). */
export async function stillParked(q: Queryable, clock: Clock, ref: KeyRef): Promise<StillParked | undefined> {
  const now = sqlNow(q, clock);
  const [row] = await q<StillParked[]>`
    select (extract(epoch from l.wake_at - ${now}) * 1000)::float8 as due_in_ms,
           (select e.queue from stepkey.queue_entries e where e.scope = l.scope and e.key = l.key and not e.holding) as queue
      from stepkey.ledger l
     where l.scope = ${ref.scope} and l.key = ${ref.key} and l.status = 'waiting'`;
  return row;
}

/**
 * Takes one parked run that is due, now (a prompt wake after an event or a
 * child's end), as the sweeper would: a new lease token — only if its
 * workflow version is one of `versions` (this process can execute it).
 * Undefined otherwise. It waits for a row lock held by another sender (not
 * SKIP LOCKED, which would skip a run that a concurrent send is marking due),
 * and then finds it no longer waiting if another process took it first.
 */
export async function wakeDueRun(
  q: Queryable,
  clock: Clock,
  ref: KeyRef,
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
): Promise<Omit<SweptRun, 'queue'> | undefined> {
  const now = sqlNow(q, clock);
  const [row] = await q<Omit<SweptRun, 'queue'>[]>`
    with due as (
      select l.scope, l.key
        from stepkey.ledger l
       where l.scope = ${ref.scope} and l.key = ${ref.key} and l.status = 'waiting' and l.wake_at <= ${now}
         and not ${queuedWithoutSlot(q, 'l')}
         and exists (select 1 from json_to_recordset(${JSON.stringify(versions)}::json) as v(name text, version int)
                      where v.name = l.name and v.version = l.version)
       for update
    )
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = gen_random_uuid(),
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           updated_at = ${now}
      from due d
     where l.scope = d.scope and l.key = d.key
    returning l.scope, l.key, l.lease_token::text as token, l.attempts`;
  return row;
}
