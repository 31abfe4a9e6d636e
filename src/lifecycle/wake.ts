/**
 * Wake: a waiting run is marked due — its `wake_at` now — by whatever ends
 * its wait before its time: an event sent on its topic, the end of the child
 * it waits on. (A resolution of a review marks it due in resolve.ts; a limit
 * slot given back, in stepkey.limit_give_back; a queue slot is its
 * dispatch's, dispatch.ts.) Any sweeper then takes it; the process that
 * marked it takes it at once when it runs its version (`takeDueRun`).
 *
 * Guarantee: a wake-up is never lost. Each waker locks the waiting run's row
 * before it writes, and marks it due only if it is parked on this very wait;
 * a run deciding to wait locks its own row before it reads (park.ts), so a
 * waker either comes first — its write is seen — or finds the run parked.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { queuedWithoutSlot } from './queued.js';

/** Marks the run due now if it is parked waiting for this topic (the sender holds its row's lock). */
export function wakeForEventStatement(q: Queryable, clock: Clock, scope: string, key: string, topic: string) {
  const now = sqlNow(q, clock);
  return q<{ woken: number }[]>`
    update stepkey.ledger
       set wake_at = ${now}
     where scope = ${scope} and key = ${key}
       and status = 'waiting' and wait_kind = 'event' and wait_for = ${topic}
    returning 1 as woken`;
}

/** Locks the parent's row until the child's ending transaction commits. */
export function lockParentStatement(q: Queryable, scope: string, parentRun: string) {
  return q`select 1 from stepkey.ledger where scope = ${scope} and key = ${parentRun} for no key update`;
}

/** Marks the parent due if it is parked waiting for this child. */
export function wakeParentStatement(q: Queryable, clock: Clock, scope: string, parentRun: string, childKey: string) {
  const now = sqlNow(q, clock);
  return q`
    update stepkey.ledger
       set wake_at = ${now}
     where scope = ${scope} and key = ${parentRun}
       and status = 'waiting' and wait_kind = 'child' and wait_for = ${childKey}`;
}

/** The statements that mark a child run's parent due, for a transaction that ends the child. */
export function wakeParentStatements(q: Queryable, clock: Clock, child: KeyRef, parentRun: string | null) {
  if (!parentRun) return [];
  return [lockParentStatement(q, child.scope, parentRun), wakeParentStatement(q, clock, child.scope, parentRun, child.key)];
}

/** A run taken by a wake: its new lease. */
export interface TakenRun {
  scope: string;
  key: string;
  token: string;
  attempts: number;
}

/**
 * Takes one parked run that is due, now (a prompt wake after an event or a
 * child's end), as the sweeper would: a new lease token (minted here, by the
 * caller: nothing volatile in the UPDATE) — only if its workflow version is
 * one of `versions` (this process can execute it) and its deadline has not
 * passed (then it is the sweep's to end). Undefined otherwise. It waits for a
 * row lock held by another waker (not SKIP LOCKED, which would skip a run
 * that a concurrent send is marking due), and then finds it no longer
 * waiting if another process took it first.
 */
export async function takeDueRun(
  q: Queryable,
  clock: Clock,
  ref: KeyRef,
  token: string,
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
): Promise<TakenRun | undefined> {
  const now = sqlNow(q, clock);
  const [row] = await q<TakenRun[]>`
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = ${token}::uuid,
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           updated_at = ${now}
     where l.scope = ${ref.scope} and l.key = ${ref.key} and l.status = 'waiting' and l.wake_at <= ${now}
       and (l.deadline_at is null or l.deadline_at > ${now})
       and not ${queuedWithoutSlot(q, 'l')}
       and exists (select 1 from json_to_recordset(${JSON.stringify(versions)}::json) as v(name text, version int)
                    where v.name = l.name and v.version = l.version)
    returning l.scope, l.key, l.lease_token::text as token, l.attempts`;
  return row;
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
