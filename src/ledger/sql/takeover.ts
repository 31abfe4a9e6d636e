/**
 * Takeover: the rare path of a claim. A key whose holder's lease ran out, or
 * a run that failed and may be resumed, is owned again by whoever updates it
 * first.
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

export async function takeoverRow(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
): Promise<{ attempts: number } | undefined> {
  const now = sqlNow(q, clock);
  const rows = await q<{ attempts: number }[]>`
    update stepkey.ledger
       set status = 'in_progress',
           lease_token = ${token}::uuid,
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = attempts + 1,
           expires_at = null,
           updated_at = ${now}
     where scope = ${request.scope} and key = ${request.key}
       and fingerprint = ${request.fingerprint}
       and ((status = 'in_progress' and locked_until <= ${now}) or status = 'failed')
       and (expires_at is null or expires_at > ${now})
       and (select pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0)))
    returning attempts`;
  return rows[0];
}

/**
 * Forgets one expired key and everything under it (a run's steps). An
 * expired key is a new request. Under the key's advisory lock, like a
 * takeover: if another claimant holds it, nothing is deleted (it is reported
 * "in progress").
 */
export async function forgetExpiredRow(q: Queryable, clock: Clock, scope: string, key: string): Promise<boolean> {
  const now = sqlNow(q, clock);
  const [row] = await q<{ forgotten: number }[]>`
    with root as (
      delete from stepkey.ledger
       where scope = ${scope} and key = ${key} and expires_at <= ${now}
         and (select pg_try_advisory_xact_lock(hashtextextended(${scope} || chr(31) || ${key}, 0)))
      returning scope, key
    ), children as (
      delete from stepkey.ledger c
       using root r
       where c.scope = r.scope and c.parent_key = r.key
      returning 1
    )
    select count(*)::int as forgotten from root`;
  return (row?.forgotten ?? 0) > 0;
}
