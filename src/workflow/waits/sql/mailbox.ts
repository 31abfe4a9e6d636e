/**
 * The mailbox: events sent to runs, first in, first out per (run, topic).
 *
 * Guarantees:
 * - A send is kept once per (run, topic, sender's key): the same key again
 *   adds nothing (`inserted` is false, and the stored fingerprint tells a
 *   repeat from a mismatch).
 * - A message is consumed once: `consumeStatement` marks the oldest
 *   unconsumed message of the topic as consumed by the waiting step, in the
 *   transaction that records the step's outcome — if that transaction rolls
 *   back, so does the consumption.
 * - A wake-up is never lost: the sender locks the run's row before it writes
 *   (lockTargetRun), and marks the run due only if it is parked on this topic
 *   (lifecycle/wake.ts; lifecycle/park.ts for the waiting side).
 */
import type { Queryable } from '../../../db/connect.js';
import { type Clock, sqlNow } from '../../../db/clock.js';

export interface TargetRun {
  status: string;
  name: string | null;
  version: number | null;
  wait_kind: string | null;
  wait_for: string | null;
  /** Past its expiry (a failed run kept for its retention): a claim of its key would forget it. */
  expired: boolean;
}

/** Locks the target run's row until the send commits; no row: no such run. */
export function lockTargetRun(q: Queryable, clock: Clock, scope: string, key: string) {
  const now = sqlNow(q, clock);
  return q<TargetRun[]>`
    select status, name, version, wait_kind, wait_for, coalesce(expires_at <= ${now}, false) as expired
      from stepkey.ledger
     where scope = ${scope} and key = ${key} and kind = 'run'
       for no key update`;
}

export interface NewMessage {
  scope: string;
  runKey: string;
  topic: string;
  senderKey: string;
  fingerprint: string;
  payload: string;
}

export function insertMessageStatement(q: Queryable, clock: Clock, message: NewMessage) {
  const now = sqlNow(q, clock);
  return q<{ seq: number; inserted: boolean; fingerprint: string }[]>`
    with inserted as (
      insert into stepkey.mailbox (scope, run_key, topic, sender_key, fingerprint, payload, sent_at)
      values (${message.scope}, ${message.runKey}, ${message.topic}, ${message.senderKey},
              ${message.fingerprint}, ${message.payload}, ${now})
      on conflict (scope, run_key, topic, sender_key) do nothing
      returning seq, fingerprint
    )
    select seq::float8 as seq, true as inserted, fingerprint from inserted
    union all
    select m.seq::float8, false, m.fingerprint
      from stepkey.mailbox m
     where m.scope = ${message.scope} and m.run_key = ${message.runKey}
       and m.topic = ${message.topic} and m.sender_key = ${message.senderKey}
       and not exists (select 1 from inserted)`;
}

/** Consumes the oldest unconsumed message of the topic for the step `stepKey`. */
export function consumeStatement(q: Queryable, clock: Clock, scope: string, runKey: string, topic: string, stepKey: string) {
  const now = sqlNow(q, clock);
  return q<{ sender_key: string; payload: string }[]>`
    update stepkey.mailbox m
       set consumed_at = ${now}, consumed_by = ${stepKey}
     where (m.scope, m.run_key, m.topic, m.sender_key) = (
             select scope, run_key, topic, sender_key
               from stepkey.mailbox
              where scope = ${scope} and run_key = ${runKey} and topic = ${topic} and consumed_at is null
              order by seq
              limit 1
                for update)
    returning m.sender_key, m.payload`;
}
