/**
 * Takeover: the rare path of a claim. A key whose holder's lease ran out, or
 * one that failed and may be resumed, is owned again by whoever updates it
 * first. (A run's claim takes over with lifecycle/take-over.ts, which also
 * puts a failed run on a queue back in line.)
 *
 * Guarantee: only with the same fingerprint, and only while the row is still
 * expired or failed — of two contenders exactly one gets a row back. The new
 * lease token fences the old holder out of every later write. Like the claim,
 * it never waits for another claimant's work: it first takes the key's
 * advisory lock (evaluated once, before any row is touched), and a `once`
 * that took the key over and still works holds that lock — the answer is then
 * no row, and the claim reports "in progress".
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { ClaimRequest } from '../types.js';

export interface TakenOver {
  attempts: number;
  rootKey: string | null;
  version: number | null;
  /** Parked for a slot instead (a failed run on a queue): the caller holds no lease. */
  requeued: boolean;
  waitKind: string | null;
  waitStep: string | null;
  waitFor: string | null;
  /** A run's takeover (lifecycle/take-over.ts): the queue whose slot the run still holds, if any. */
  heldQueue?: string | null;
}

export async function takeoverRow(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
): Promise<TakenOver | undefined> {
  const now = sqlNow(q, clock);
  const rows = await q<TakenOver[]>`
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = ${token}::uuid,
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = l.attempts + 1,
           expires_at = null,
           updated_at = ${now}
     where l.scope = ${request.scope} and l.key = ${request.key}
       and l.fingerprint = ${request.fingerprint}
       and ((l.status = 'in_progress' and l.locked_until <= ${now}) or l.status = 'failed')
       and (l.expires_at is null or l.expires_at > ${now})
       and (select pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0)))
    returning l.attempts, l.root_key as "rootKey", l.version, false as requeued,
              l.wait_kind as "waitKind", l.wait_step as "waitStep", l.wait_for as "waitFor"`;
  return rows[0];
}

/**
 * Expire: forgets one expired run and everything under it (its steps, its
 * attempts, its mailbox, its queue entry (a failed run keeps one; an ended run holds no
 * slot), its child runs
 * that have ended and their steps). An expired key is a new request. Under the key's advisory lock, like a
 * takeover: if another claimant holds it, nothing is deleted (it is reported
 * "in progress").
 *
 * A send that locked the run's row before the delete commits its message
 * while the delete waits for that lock — after the statement's snapshot, so
 * the statement's own mailbox delete misses it. The mailbox is therefore
 * emptied again by a second statement (forgetMailStatement), whose snapshot
 * is taken after the row is gone: no message of the forgotten run is left
 * for a new run under the same key. Every part names the scope, so that the
 * statement runs on the scope's one node (Citus).
 */
export async function forgetExpiredRow(q: Queryable, clock: Clock, scope: string, key: string): Promise<boolean> {
  const now = sqlNow(q, clock);
  const [row] = await q<{ forgotten: number; keys: string[] }[]>`
    with lock as materialized (
      -- The key's advisory lock, taken first and on its own (on Citus: on the coordinator, like a
      -- takeover's; nested in the DELETE it would be planned as a subplan of a subplan).
      select pg_try_advisory_xact_lock(hashtextextended(${scope} || chr(31) || ${key}, 0)) as held
    ), root as (
      delete from stepkey.ledger
       where scope = ${scope} and key = ${key} and expires_at <= ${now}
         -- as the purge: a child run whose parent is unfinished is kept (the parent reads it)
         and not exists (select 1 from stepkey.ledger p
                          where p.scope = ${scope} and p.key = ledger.parent_run and p.status in ('in_progress', 'waiting', 'failed'))
         and (select held from lock)
      returning scope, key
    ), ended_children as (
      select c.scope, c.key
        from stepkey.ledger c join root r on c.scope = ${scope} and c.scope = r.scope and c.parent_run = r.key
       where c.status in ('completed', 'cancelled', 'deadline_exceeded', 'failed')
         -- as the purge: a child being resumed right now is skipped, kept with its steps
         for update of c skip locked
    ), gone as (
      select scope, key from root union all select scope, key from ended_children
    ), steps as (
      delete from stepkey.steps s using gone g where s.scope = ${scope} and s.scope = g.scope and s.run_key = g.key returning 1
    ), keyed as (
      delete from stepkey.ledger k using gone g where k.scope = ${scope} and k.scope = g.scope and k.parent_key = g.key returning 1
    ), mail as (
      delete from stepkey.mailbox m using gone g where m.scope = ${scope} and m.scope = g.scope and m.run_key = g.key returning 1
    ), attempts as (
      delete from stepkey.step_attempts a using gone g where a.scope = ${scope} and a.scope = g.scope and a.run_key = g.key returning 1
    ), entries as (
      delete from stepkey.queue_entries q using gone g where q.scope = ${scope} and q.scope = g.scope and q.key = g.key returning 1
    ), children as (
      delete from stepkey.ledger c using ended_children e where c.scope = ${scope} and c.scope = e.scope and c.key = e.key returning 1
    )
    select (select count(*) from root)::int as forgotten, coalesce((select array_agg(key) from gone), '{}'::text[]) as keys`;
  if (!row || row.forgotten === 0) return false;
  await forgetMailStatement(q, row.keys.map((key) => ({ scope, key })), scope);
  return true;
}

/**
 * Deletes what is left in the mailboxes of runs just deleted (`runs`), from a
 * fresh snapshot. A run that exists again under one of the keys (a new
 * request, when the deletion committed on its own) keeps its mailbox. With
 * `scope`, every run is of that scope and the statement names it (Citus).
 */
export function forgetMailStatement(q: Queryable, runs: readonly { scope: string; key: string }[], scope: string | null) {
  const pinned = scope === null ? q`` : q`m.scope = ${scope} and`;
  return q`
    delete from stepkey.mailbox m
     where ${pinned} (m.scope, m.run_key) in (select * from json_to_recordset(${JSON.stringify(runs)}::json) as r(scope text, key text))
       and not exists (select 1 from stepkey.ledger l where l.scope = m.scope and l.key = m.run_key)`;
}

