/**
 * Taking from a step limit, and giving a slot back.
 *
 * A limit's state lives in its partition's row (stepkey.limit_partitions):
 * the rate bucket (tokens at refilled_at) and the count of slots held, one
 * per stepkey.limit_slots row. Acquire is one statement: it takes a token
 * and/or a slot by updating that row in place, and inserts the slot's row
 * under the run's lease token. A refused acquire keeps the row locked until
 * its transaction — which parks the run — commits, so a slot given back in
 * the meantime (stepkey.limit_give_back, migration 0008) waits for that lock
 * and then finds the run parked and marks it due: no wake-up is lost.
 */
import type postgres from 'postgres';
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import type { Lease } from '../../ledger/types.js';

type Fragment = postgres.PendingQuery<postgres.Row[]>;

export interface Acquired {
  /** The limit's settings row exists (the engine wrote it). */
  known: boolean;
  /** The step may run now. */
  granted: boolean;
  /** A concurrency slot is held by the run for this step (taken now, or kept from a takeover or retry). */
  slot: boolean;
  /** When not granted: when to try again (ms, stepkey's clock) — the next token's time, or a backstop for a slot. */
  retry_at_ms: number;
}

export interface AcquireRequest {
  lease: Lease;
  limit: string;
  partition: string;
  step: string;
  /** A run waiting for a slot is woken when one is given back; it also tries again after this long. */
  backstopMs: number;
}

/**
 * Takes a token (rate) and/or a slot (concurrency) of `limit`'s partition for
 * the step, or nothing. Guarantee: per limit and partition, slots held never
 * exceed the concurrency on the limit's row, and grants never outrun the
 * bucket (`rate_limit` tokens, refilled at rate_limit per rate_period_ms) —
 * the partition's row is changed by INSERT … ON CONFLICT DO UPDATE, which
 * locks it and evaluates the condition on its latest committed version, so
 * two acquirers never both take the last slot or token. A run that already
 * holds a slot of this partition (a retry of its step, a takeover of its run,
 * the same limit's previous step) keeps it: one run never holds two, and the
 * slot's token becomes this lease's. Fenced by the run's lease (SKL01).
 *
 * A step refused for a token retries when the next one is due, one token's
 * time later for every run already waiting (read as the statement began: at
 * worst early, and it parks again).
 * Tokens are never reserved ahead: a run that comes back late takes a token
 * like any other, so however late the waiters come, starts in any window of
 * one period never exceed the bucket plus one period's refill.
 */
export function acquireStatement(q: Queryable, clock: Clock, request: AcquireRequest) {
  const { lease, limit, partition, step } = request;
  // The wall clock, not the transaction's start: the transaction may be an earlier tx step's.
  const now = q`(clock_timestamp() + ${clock.offsetMs}::float8 * interval '1 millisecond')`;
  const refilled = (row: string) => refilledTokens(q, now, row);
  return q<Acquired[]>`
    with mine as (
      select count(*) > 0 as held from stepkey.limit_slots
       where scope = ${lease.scope} and key = ${lease.key} and limit_name = ${limit} and partition = ${partition}
    ), ${takeFromPartition(q, now, limit, partition)}, slot as (
      insert into stepkey.limit_slots as l (scope, key, limit_name, partition, step, token, granted_at)
      select ${lease.scope}, ${lease.key}, ${limit}, ${partition}, ${step}, ${lease.token}::uuid, ${now}
        from taken, settings s
       where s.concurrency is not null
      on conflict (scope, key, limit_name, partition) do update
         set step = excluded.step, token = excluded.token, granted_at = excluded.granted_at
      returning 1
    )
    select stepkey.lease_held((select count(*) from stepkey.ledger
                                where scope = ${lease.scope} and key = ${lease.key}
                                  and lease_token = ${lease.token}::uuid and status = 'in_progress')) and exists (select 1 from settings) as known,
           exists (select 1 from taken) as granted,
           exists (select 1 from slot) as slot,
           (extract(epoch from ${now}) * 1000
             + coalesce(
                 -- Refused for a token: when the next one is due, plus a token's time for every run
                 -- already waiting (so that waiters come back spread out, roughly in turn). The
                 -- refusal was decided on the partition row's latest version, these figures come
                 -- from this statement's snapshot: when the snapshot still shows a token and no
                 -- full slot count (another acquirer took the token after it), one token's time.
                 (select case when s.rate_limit is not null
                               and (s.concurrency is null or ${refilled('p')} < 1 or m.held or coalesce(p.held, 0) < s.concurrency)
                              then (case when ${refilled('p')} < 1 then 1 - ${refilled('p')} else 1 end
                                    + (select count(*) from stepkey.ledger w
                                        where w.status = 'waiting' and w.wait_kind = 'limit'
                                          and w.wait_for = stepkey.limit_wait_for(${limit}, ${partition})))
                                   * s.rate_period_ms / s.rate_limit end
                    from settings s
                    cross join mine m
                    left join stepkey.limit_partitions p on p.limit_name = ${limit} and p.partition = ${partition}
                   where not exists (select 1 from taken)),
                 -- Refused for a slot: woken when one is given back, or after the backstop.
                 ${request.backstopMs}::float8))::float8 as retry_at_ms`;
}

/** The bucket's tokens in the partition row `row` now: refilled since its last refill, never above the limit. */
export function refilledTokens(q: Queryable, now: Fragment, row: string) {
  return q`
    least(s.rate_limit::float8,
          coalesce(${q(row)}.tokens, s.rate_limit::float8)
          + greatest(0, extract(epoch from ${now} - coalesce(${q(row)}.refilled_at, ${now})) * 1000) * s.rate_limit / s.rate_period_ms)`;
}

/**
 * The CTEs `settings` (the limit's row) and `taken` (one row when the step
 * may run: a token and/or a slot taken from the partition's row, which the
 * upsert locks either way), after a CTE `mine` that says whether the run
 * already holds the partition's slot. Used on one PostgreSQL and on Citus.
 */
export function takeFromPartition(q: Queryable, now: Fragment, limit: string, partition: string) {
  const refilled = (row: string) => refilledTokens(q, now, row);
  return q`settings as (
      select concurrency, rate_limit, rate_period_ms from stepkey.limits where name = ${limit}
    ), taken as (
      insert into stepkey.limit_partitions as p (limit_name, partition, held, tokens, refilled_at, granted)
      select ${limit}, ${partition}, case when s.concurrency is null then 0 else 1 end,
             s.rate_limit::float8 - 1, ${now}, 1
        from settings s
      on conflict (limit_name, partition) do update
         set held = p.held + (select case when s.concurrency is null or m.held then 0 else 1 end from settings s, mine m),
             tokens = (select ${refilled('p')} - 1 from settings s),
             refilled_at = greatest(p.refilled_at, ${now}),
             granted = p.granted + 1
       where (select (s.concurrency is null or m.held or p.held < s.concurrency)
                     and (s.rate_limit is null or ${refilled('p')} >= 1)
                from settings s, mine m)
      returning 1
    )`;
}

/** A run marked due because a slot was given back. */
export interface WokenRun {
  scope: string;
  key: string;
}

/**
 * Gives back the slot the run's step holds — in the commit that records the
 * step, fenced by the same lease — and marks the longest waiter of that
 * limit and partition due. Returns the runs it marked due.
 */
export function giveBackStatement(q: Queryable, lease: Lease, step: string) {
  return q<WokenRun[]>`
    select woken_scope as scope, woken_key as key
      from stepkey.limit_give_back(${lease.scope}, ${lease.key}, ${step}, ${lease.token}::uuid)`;
}
