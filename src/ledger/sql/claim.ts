/**
 * The claim statement: one round trip that either inserts the key as in
 * progress (the caller owns it) or reads the row that is already there.
 *
 * Guarantees:
 * - A key that exists is never written by a claim: a replay, a mismatch or an
 *   in-progress answer costs one read. (`ON CONFLICT DO UPDATE … WHERE` would
 *   row-lock the existing row even when its WHERE is false, so every replay
 *   would write and duplicates would queue behind each other.)
 * - A claim does not wait for another claimant's work. An insert that
 *   conflicts with an uncommitted insert of the same key waits until that
 *   transaction ends — for `once`, until its work is done. So a claim that
 *   finds no row first takes a transaction-scoped advisory lock on the key
 *   (pg_try_advisory_xact_lock): if a `once` or a folded run start holds the
 *   key uncommitted, the lock is taken and the answer is "locked" (in
 *   progress) at once. A claim that finds the row needs no lock, so any
 *   number of replays run side by side. (An insert may still wait an instant
 *   behind a heartbeat or completion updating the same row.)
 *
 * Two modes. `insert` writes the claim as an in-progress row (the split
 * form: the claim commits on its own, then the work, then the outcome).
 * `lock` writes nothing and answers "vacant" when no row exists: `once` holds
 * the key by its advisory lock for the rest of its transaction and inserts the
 * finished row at the end (see once.ts) — one write per key instead of an
 * insert and an update.
 *
 * Under READ COMMITTED the read half uses the snapshot taken when the
 * statement began: a row committed after it (by a holder that finished while
 * this statement ran) is not seen. In `insert` mode the insert still meets
 * that row, so the statement returns no row and the caller reads again. In
 * `lock` mode nothing would meet it — `once` would run its function for a key
 * just completed — so the advisory lock is first tried by a statement of its
 * own, sent with the claim in one round trip: the claim's snapshot is then
 * taken after that attempt, and "vacant" is answered only when the earlier
 * statement got the lock. A holder releases the lock only after its commit is
 * visible, so a claim that got the lock sees the holder's row. That order
 * holds on one connection — a transaction's, as `once` and the outbox use.
 * On the pool (engine.resume, a caller waiting for a run's result) the two
 * statements may run on two connections in either order, and each lock is
 * released when its statement ends: there "vacant" means only that no row
 * was found and no claimant held the key at those instants, and those
 * callers take it as no more than that (the run is gone).
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { type SqlText, StatementText } from '../../db/statement-text.js';
import type { ClaimRequest, LedgerKind } from '../types.js';

export type ClaimState =
  | 'owned'
  | 'locked'
  | 'vacant'
  | 'expired'
  | 'mismatch'
  | 'replay'
  | 'resumable'
  | 'in_progress'
  | 'lease_expired'
  | 'waiting';

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
  root_key: string | null;
  version: number | null;
  /** The row's fingerprint, when it differs from the request's (a mismatch, or an older fingerprint version). */
  stored_fingerprint: string | null;
  /** A parked run's wait. */
  wait_kind: string | null;
  wait_step: string | null;
  wait_for: string | null;
  wait_until_ms: number | null;
  deadline_at_ms: number | null;
}

export async function claimRow(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
  mode: 'insert' | 'lock',
): Promise<ClaimRow | undefined> {
  const insert = mode === 'insert';
  const locking = insert
    ? undefined
    : q<{ held: boolean }[]>`
        select pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0)) as held`.execute();
  locking?.catch(() => {});
  const [row] = await claimRowStatement(q, clock, request, token, leaseMs, insert);
  // The claim may have got the lock just after its snapshot; only the earlier attempt counts.
  if (row?.state === 'vacant' && !(await locking)?.[0]?.held) return { ...row, state: 'locked' };
  return row;
}

/** claimRow's statement, not sent yet (in `insert` mode it is the whole claim: an enqueue pipelines it with what follows). */
export function claimRowStatement(q: Queryable, clock: Clock, request: ClaimRequest, token: string, leaseMs: number, insert: boolean) {
  const b = new StatementText();
  const now = b.now(clock);
  b.sql`
    with existing as (
      select l.expires_at, l.fingerprint, l.status, l.locked_until, l.attempts, l.outcome,
             l.outcome_ok, l.outcome_code, l.kind, l.name, l.root_key, l.version,
             l.wait_kind, l.wait_step, l.wait_for, l.wait_until, l.parent_run, l.deadline_at
        from stepkey.ledger l
       where l.scope = ${request.scope} and l.key = ${request.key}
    ), lock as (
      select case when exists (select 1 from existing) then null
                  else pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0))
             end as held
    ), inserted as (`;
  insertRow(b, now, request, token, leaseMs);
  b.sql`
        from lock
       where lock.held and ${insert}::boolean
      on conflict (scope, key) do nothing
      returning attempts, (extract(epoch from deadline_at) * 1000)::float8 as deadline_at_ms
    )
    select 'owned' as state, attempts, null::text as status, null::text as outcome,
           null::boolean as outcome_ok, null::int as outcome_code, null::int as retry_after_ms,
           null::text as kind, null::text as name, null::text as root_key, null::int as version,
           null::text as stored_fingerprint, null::text as wait_kind, null::text as wait_step,
           null::text as wait_for, null::float8 as wait_until_ms, deadline_at_ms
      from inserted
    union all
    select case when lock.held then 'vacant' else 'locked' end, 0, null, null, null, null, null, null, null,
           null, null, null, null, null, null, null, null
      from lock
     where lock.held is not null and not (lock.held and ${insert}::boolean)
    union all`;
  existingRow(b, now, request);
  b.sql`
      from existing l`;
  return b.query<ClaimRow[]>(q);
}

/** The columns and values of a claim's in-progress row (for `insert into stepkey.ledger … from …`). */
function insertRow(b: StatementText, now: SqlText, request: ClaimRequest, token: string, leaseMs: number): void {
  const deadline = request.run?.deadline;
  b.sql`
      insert into stepkey.ledger
        (scope, key, kind, name, parent_key, fingerprint, status,
         lease_token, locked_until, attempts, created_at, updated_at, version, input, root_key, trace_context, flow, deadline_at)
      select ${request.scope}, ${request.key}, ${request.kind ?? 'request'}, ${request.name ?? null},
             ${request.parentKey ?? null}, ${request.fingerprint}, 'in_progress',
             ${token}::uuid, ${now} + ${leaseMs}::float8 * interval '1 millisecond', 1, ${now}, ${now},
             ${request.run?.version ?? null}::int, ${request.run?.input ?? null}::text, ${request.rootKey ?? null}::text,
             ${request.run?.traceContext ?? null}::text, ${request.run?.flow ?? true}::boolean, `;
  if (!deadline) b.sql`null::timestamptz`;
  else if ('inMs' in deadline) b.sql`${now} + ${deadline.inMs}::float8 * interval '1 millisecond'`;
  else b.sql`to_timestamp(${deadline.atMs}::float8 / 1000)`;
}

/** What an existing row `l` answers the request: a ClaimRow's columns, in order. */
function existingRow(b: StatementText, now: SqlText, request: ClaimRequest): void {
  b.sql`
    select case
             -- A child run whose parent is unfinished is kept past its expiry (the parent reads it).
             when l.expires_at is not null and l.expires_at <= ${now}
                  and (l.parent_run is null or not exists (
                        select 1 from stepkey.ledger p
                         where p.scope = ${request.scope} and p.key = l.parent_run
                           and p.status in ('in_progress', 'waiting', 'failed'))) then 'expired'
             when l.fingerprint <> ${request.fingerprint} then 'mismatch'
             when l.status in ('completed', 'cancelled', 'deadline_exceeded') then 'replay'
             when l.status = 'failed' then 'resumable'
             when l.status = 'waiting' then 'waiting'
             when l.locked_until > ${now} then 'in_progress'
             else 'lease_expired'
           end as state,
           l.attempts, l.status, l.outcome, l.outcome_ok, l.outcome_code,
           greatest(0, ceil(extract(epoch from (l.locked_until - ${now})) * 1000))::int as retry_after_ms,
           l.kind, l.name, l.root_key, l.version,
           case when l.fingerprint <> ${request.fingerprint} then l.fingerprint end as stored_fingerprint,
           l.wait_kind, l.wait_step, l.wait_for, (extract(epoch from l.wait_until) * 1000)::float8 as wait_until_ms,
           (extract(epoch from l.deadline_at) * 1000)::float8 as deadline_at_ms`;
}

/**
 * The probe: the key's committed row and what it answers, read outside any
 * transaction, writing and locking nothing. A key whose row settles the call
 * (a replay, a mismatch, a run in progress or parked) costs this one
 * statement; no row (or one to take over or forget) sends the caller on to a
 * claim, which decides under its own snapshot and lock.
 */
export async function probeRow(q: Queryable, clock: Clock, request: ClaimRequest): Promise<ClaimRow | undefined> {
  const b = new StatementText();
  existingRow(b, b.now(clock), request);
  b.sql`
      from stepkey.ledger l
     where l.scope = ${request.scope} and l.key = ${request.key}`;
  const [row] = await b.query<ClaimRow[]>(q);
  return row;
}

/**
 * The claim of a key the probe found vacant: the in-progress row inserted
 * under the key's advisory lock, taken as the full claim takes it. Guarantee:
 * it inserts only when it holds the lock and no row exists, and it never
 * waits — another claimant's uncommitted row holds the lock (the insert is
 * skipped), a committed one conflicts (do nothing). Either way it returns no
 * row, and the caller makes the full claim, which gives the answer.
 */
export async function insertClaimRow(
  q: Queryable,
  clock: Clock,
  request: ClaimRequest,
  token: string,
  leaseMs: number,
): Promise<InsertedClaim | undefined> {
  const b = new StatementText();
  insertRow(b, b.now(clock), request, token, leaseMs);
  b.sql`
     where pg_try_advisory_xact_lock(hashtextextended(${request.scope} || chr(31) || ${request.key}, 0))
    on conflict (scope, key) do nothing
    returning attempts, (extract(epoch from deadline_at) * 1000)::float8 as deadline_at_ms`;
  const [row] = await b.query<InsertedClaim[]>(q);
  return row;
}

/** What a claim answers when it inserted the row. */
export interface InsertedClaim {
  attempts: number;
  deadline_at_ms: number | null;
}
