/**
 * Takeover: the rare path of a claim. A key whose holder's lease ran out, or
 * a run that failed and may be resumed, is owned again by whoever updates it
 * first.
 *
 * Guarantee: only with the same fingerprint, and only while the row is still
 * expired or failed — of two contenders exactly one gets a row back. The new
 * lease token fences the old holder out of every later write.
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
    returning attempts`;
  return rows[0];
}

/** Forgets one expired key and everything under it (a run's steps). An expired key is a new request. */
export async function forgetExpiredRow(q: Queryable, clock: Clock, scope: string, key: string): Promise<void> {
  const now = sqlNow(q, clock);
  await q`
    with root as (
      delete from stepkey.ledger
       where scope = ${scope} and key = ${key} and expires_at <= ${now}
      returning scope, key
    )
    delete from stepkey.ledger c
     using root r
     where c.scope = r.scope and c.parent_key = r.key`;
}
