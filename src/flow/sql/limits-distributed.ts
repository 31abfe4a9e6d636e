/**
 * A step limit on Citus: the same acquire and give-back as limits.ts, made
 * of statements Citus can run. The limit's settings and partitions are
 * coordinator tables, a run's slots live in its scope's shard, and Citus
 * runs no statement that writes one while joining the other:
 *
 *   acquire    the run's lease and its slot read on its scope's node; the
 *              partition's row taken from on the coordinator (the same
 *              upsert as on one PostgreSQL, given what the run holds); the
 *              slot's row written in the run's scope; when refused for a
 *              token, the runs already waiting counted across shards
 *   give back  stepkey.limit_give_back_distributed (migration 0017), on the
 *              coordinator: a step's slot in the commit that records it;
 *              every slot of a run a transition moved, in the transition's
 *              transaction; and the slots a sweep finds left by runs that
 *              stopped executing without giving them back (a process killed
 *              between, a cancel of a run executing elsewhere)
 *
 * The guarantee is the one limits.ts states, kept under the partition's
 * advisory lock (stepkey.limit_partition_lock, migration 0017) rather than
 * its row's: Citus commits the coordinator's part before the nodes', and a
 * row's lock is free once the coordinator's part has committed, while an
 * advisory lock is held until every node has — so a give-back that follows
 * a refused acquire sees its park. The run's own rows are read locked, so a
 * sweep's give-back of its slots never crosses its acquire.
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';
import { refilledTokens, takeFromPartition, type Acquired, type AcquireRequest, type WokenRun } from './limits.js';

/** Takes from the limit's partition as acquireStatement does, in the statements Citus can run. */
export async function acquireDistributed(q: Queryable, clock: Clock, request: AcquireRequest): Promise<Acquired> {
  const { lease, limit, partition, step } = request;
  // On the run's node: the lease (raises when it is lost) and whether the run holds this partition's
  // slot, both locked — a give-back of the run's slots (a sweep's) either finished first, or finds
  // the run executing and keeps them.
  const [mine] = await q<{ held: boolean }[]>`
    with run as (
      select 1 from stepkey.ledger
       where scope = ${lease.scope} and key = ${lease.key} and lease_token = ${lease.token}::uuid and status = 'in_progress'
         for share
    ), slot as (
      select 1 from stepkey.limit_slots
       where scope = ${lease.scope} and key = ${lease.key} and limit_name = ${limit} and partition = ${partition}
         for update
    )
    select stepkey.lease_held((select count(*) from run)) and exists (select 1 from slot) as held`;
  const now = q`(clock_timestamp() + ${clock.offsetMs}::float8 * interval '1 millisecond')`;
  // On the coordinator, under the partition's lock (held until every node has committed): the
  // partition's row, taken from or left as it is.
  await q`select stepkey.limit_partition_lock(${limit}, ${partition})`;
  const [taken] = await q<{ known: boolean; granted: boolean; slotted: boolean; now_ms: number; token_ms: number | null; short: number | null }[]>`
    with mine as (select ${mine?.held ?? false}::boolean as held), ${takeFromPartition(q, now, limit, partition)}
    select exists (select 1 from settings) as known,
           exists (select 1 from taken) as granted,
           coalesce((select s.concurrency is not null from settings s), false) as slotted,
           extract(epoch from ${now}) * 1000 as now_ms,
           (select s.rate_period_ms::float8 / s.rate_limit from settings s) as token_ms,
           -- Refused with the bucket empty (in this snapshot): how many tokens short.
           (select case when s.rate_limit is not null and (s.concurrency is null or m.held or coalesce(p.held, 0) < s.concurrency)
                        then greatest(1 - ${refilledTokens(q, now, 'p')}, 0) end
              from settings s cross join mine m
              left join stepkey.limit_partitions p on p.limit_name = ${limit} and p.partition = ${partition}
             where not exists (select 1 from taken)) as short`;
  if (!taken?.known) return { known: false, granted: false, slot: false, retry_at_ms: 0 };
  if (taken.granted) {
    if (!taken.slotted) return { known: true, granted: true, slot: false, retry_at_ms: 0 };
    // In the run's scope: its slot, under this lease (kept from a retry or a takeover, or new).
    await q`
      insert into stepkey.limit_slots as l (scope, key, limit_name, partition, step, token, granted_at)
      values (${lease.scope}, ${lease.key}, ${limit}, ${partition}, ${step}, ${lease.token}::uuid, ${now})
      on conflict (scope, key, limit_name, partition) do update
         set step = excluded.step, token = excluded.token, granted_at = excluded.granted_at`;
    return { known: true, granted: true, slot: true, retry_at_ms: 0 };
  }
  if (taken.short === null || taken.token_ms === null) return { known: true, granted: false, slot: false, retry_at_ms: Number(taken.now_ms) + request.backstopMs };
  // Refused for a token: the next one's time, plus a token's time for every run already waiting (as limits.ts).
  const [waiting] = await q<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger w
     where w.status = 'waiting' and w.wait_kind = 'limit' and w.wait_for = stepkey.limit_wait_for(${limit}, ${partition})`;
  const tokens = (taken.short > 0 ? taken.short : 1) + (waiting?.n ?? 0);
  return { known: true, granted: false, slot: false, retry_at_ms: Number(taken.now_ms) + tokens * Number(taken.token_ms) };
}

/**
 * Gives back on the coordinator the slot the run's step holds under its
 * lease (`held`: in the commit that records the step), or with no `held`
 * every slot of a run that is no longer in progress. Returns the runs it
 * marked due.
 */
export function giveBackDistributedStatement(q: Queryable, run: KeyRef, held?: { step: string; token: string }) {
  return q<WokenRun[]>`
    select woken_scope as scope, woken_key as key
      from stepkey.limit_give_back_distributed(${run.scope}, ${run.key}, ${held?.step ?? null}, ${held?.token ?? null}::uuid)`;
}

/**
 * Runs that hold limit slots and are not executing (or are gone) — left by a process
 * that stopped between a transition and its give-back, or by a cancel of a
 * run executing elsewhere. A read across shards (the slots joined to their
 * runs in each shard), for the sweeper.
 */
export function slotsLeftStatement(q: Queryable, limit: number) {
  return q<KeyRef[]>`
    select distinct s.scope, s.key
      from stepkey.limit_slots s
      left join stepkey.ledger l on l.scope = s.scope and l.key = s.key
     where l.status is distinct from 'in_progress'
     limit ${limit}`;
}
