/**
 * The claim statement: one round trip that either inserts the key as in
 * progress (the caller owns it) or reads the row that is already there.
 *
 * Guarantee: a key that exists is never written by a claim — a replay, a
 * mismatch or an in-progress answer costs one read. (`ON CONFLICT DO UPDATE …
 * WHERE` would row-lock the existing row even when its WHERE is false, so
 * every replay would write and duplicates would queue behind each other.)
 *
 * Under READ COMMITTED the read half uses the snapshot taken when the
 * statement began: if the insert waited for a concurrent transaction that then
 * committed the key, the read sees nothing and the statement returns no row.
 * Callers retry once.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { ClaimRequest, LedgerKind } from '../types.js';

export type ClaimState = 'owned' | 'expired' | 'mismatch' | 'replay' | 'resumable' | 'in_progress' | 'lease_expired';

export interface ClaimRow {
  state: ClaimState;
  attempts: number;
  status: string | null;
  outcome: string | null;
  outcome_ok: boolean | null;
  outcome_code: number | null;
  retry_after_ms: number | null;
  kind: LedgerKind | null;
  name: string | null;
}

export async function claimRow(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
): Promise<ClaimRow | undefined> {
  const now = sqlNow(q, clock);
  const rows = await q<ClaimRow[]>`
    with inserted as (
      insert into stepkey.ledger
        (scope, key, kind, name, parent_key, fingerprint, status,
         lease_token, locked_until, attempts, created_at, updated_at)
      values
        (${request.scope}, ${request.key}, ${request.kind ?? 'request'}, ${request.name ?? null},
         ${request.parentKey ?? null}, ${request.fingerprint}, 'in_progress',
         ${token}::uuid, ${now} + ${leaseMs}::float8 * interval '1 millisecond', 1, ${now}, ${now})
      on conflict (scope, key) do nothing
      returning attempts
    )
    select 'owned' as state, attempts, null::text as status, null::text as outcome,
           null::boolean as outcome_ok, null::int as outcome_code, null::int as retry_after_ms,
           null::text as kind, null::text as name
      from inserted
    union all
    select case
             when l.expires_at is not null and l.expires_at <= ${now} then 'expired'
             when l.fingerprint <> ${request.fingerprint} then 'mismatch'
             when l.status in ('completed', 'cancelled') then 'replay'
             when l.status = 'failed' then 'resumable'
             when l.locked_until > ${now} then 'in_progress'
             else 'lease_expired'
           end,
           l.attempts, l.status, l.outcome, l.outcome_ok, l.outcome_code,
           greatest(0, ceil(extract(epoch from (l.locked_until - ${now})) * 1000))::int,
           l.kind, l.name
      from stepkey.ledger l
     where l.scope = ${request.scope} and l.key = ${request.key}`;
  return rows[0];
}
