/**
 * Dispatch on Citus: the same choice as dispatchStatement (dispatch.ts) —
 * priority, then partitions in turn, then the partition served least
 * recently, then first enqueued, within the queue's concurrency, each
 * partition's and the rate bucket — made in three steps, because Citus runs
 * no locking read across shards and no statement that joins a distributed
 * table to the coordinator's own:
 *
 *   choose   one read across shards (no row lock): the queue's settings and
 *            its partitions' service (coordinator tables) ranked against the
 *            slots held and the runs waiting (distributed, pulled to the
 *            coordinator as intermediate results)
 *   start    each chosen run in its own scope: its row taken if it still
 *            waits, a lease token minted here, its entry marked holding —
 *            one statement routed to the scope's node
 *   account  the partitions served and the bucket's tokens spent, on the
 *            coordinator
 *
 * Guarantee, as on one node: only under both of the queue's locks (the
 * advisory lock and its row's, on the coordinator), so no other dispatch
 * grants a slot between the choice and the start; every grant commits before
 * the lock is let go (Citus commits the nodes' part before the coordinator's
 * locks are released), so the next dispatch's read counts it. A run whose row
 * moved meanwhile (cancelled, say) or is locked by another transaction is
 * skipped: `start` takes only a row that still waits, and never waits for one.
 * One case is weaker than on one node: if a worker's COMMIT PREPARED fails
 * (its connection lost at that instant), the coordinator commits and lets the
 * locks go while the grants stay prepared, unseen until Citus's recovery
 * commits them; a dispatch meanwhile counts those slots as free.
 */
import { randomUUID } from 'node:crypto';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import { bucketTokens, freeSlots, queueOrder, servedUpsert, startedRunSet, type DispatchedRun } from './dispatch.js';

interface Chosen {
  scope: string;
  key: string;
  partition: string;
}

/** Starts up to `limit` queued runs of `queue` whose version is in `versions`, on Citus. Only under both of the queue's locks. */
export async function dispatchDistributed(
  q: Queryable,
  clock: Clock,
  queue: string,
  limit: number,
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
): Promise<DispatchedRun[]> {
  if (limit <= 0) return [];
  const chosen = (await chooseStatement(q, clock, queue, limit, versions)) as unknown as Chosen[];
  if (chosen.length === 0) return [];
  const started = await Promise.all(chosen.map((run) => startStatement(q, clock, queue, run, randomUUID(), leaseMs)));
  const runs: DispatchedRun[] = [];
  const served: string[] = [];
  started.forEach((rows, index) => {
    for (const { scope, key, token, attempts, granted } of rows as unknown as (DispatchedRun & { granted: number })[]) {
      // Checked in the statement's own snapshot with the row locked: an entry that is not there is a broken invariant.
      if (granted !== 1) throw new StepkeyError('database_error', `queue '${queue}': run '${key}' in scope '${scope}' was started without its entry`);
      runs.push({ scope, key, token, attempts });
      served.push(chosen[index]!.partition);
    }
  });
  if (runs.length > 0) await accountStatement(q, clock, queue, served);
  return runs;
}

/**
 * The runs to start, in the queue's order. The versions are matched as text
 * (`name chr(31) version`): Citus sends no table function to a shard.
 */
function chooseStatement(q: Queryable, clock: Clock, queue: string, limit: number, versions: readonly { name: string; version: number }[]) {
  const now = sqlNow(q, clock);
  const runnable = versions.map((v) => `${v.name}\u001f${v.version}`);
  return q`
    with settings as (
      select concurrency, per_partition,
             ${bucketTokens(q, now)} as tokens
        from stepkey.queues where name = ${queue}
    ), held as materialized (
      select partition, count(*)::int as n from stepkey.queue_entries where queue = ${queue} and holding group by partition
    ), waiting as materialized (
      select e.scope, e.key, e.partition, e.priority, e.seq
        from stepkey.queue_entries e
        join stepkey.ledger l on l.scope = e.scope and l.key = e.key
       where e.queue = ${queue} and not e.holding and not e.failed and e.not_before <= ${now}
         and l.status = 'waiting' and (l.wait_kind = 'slot' or l.wake_at <= ${now})
         and l.name || chr(31) || l.version = any(${runnable}::text[])
    ), free as (
      select ${freeSlots(q, limit)} as n
        from settings s
    ), ranked as (
      select w.*, row_number() over (partition by w.partition order by w.priority desc nulls last, w.seq) as rn
        from waiting w
    )
    select r.scope, r.key, r.partition
      from ranked r
      cross join settings s
      left join held h on h.partition = r.partition
      left join stepkey.queue_partitions p on p.queue = ${queue} and p.partition = r.partition
     ${queueOrder(q)}
     limit coalesce((select n from free), 0)`;
}

/**
 * One chosen run started in its scope (routed to its node): nothing if it no
 * longer waits for a slot of this queue, or if another transaction holds its
 * row (skipped, as the one-node dispatch skips it: a dispatch never waits
 * under the queue's lock). Its row and its entry move in this one statement.
 */
function startStatement(q: Queryable, clock: Clock, queue: string, run: Chosen, token: string, leaseMs: number) {
  const now = sqlNow(q, clock);
  return q`
    with target as (
      select l.scope, l.key
        from stepkey.ledger l
       where l.scope = ${run.scope} and l.key = ${run.key}
         and l.status = 'waiting' and (l.wait_kind = 'slot' or l.wake_at <= ${now})
         and exists (select 1 from stepkey.queue_entries e
                      where e.scope = ${run.scope} and e.key = ${run.key} and e.queue = ${queue} and not e.holding and not e.failed)
         for no key update of l skip locked
    ), started as (
      update stepkey.ledger l
         set status = 'in_progress',
             lease_token = ${token}::uuid,
             ${startedRunSet(q, now, leaseMs)}
        from target t
       where l.scope = ${run.scope} and l.key = ${run.key} and t.scope = l.scope and t.key = l.key
      returning l.scope, l.key, l.lease_token, l.attempts
    ), granted as (
      update stepkey.queue_entries e
         set holding = true, granted_at = ${now}, granted_token = ${token}::uuid
       where e.scope = ${run.scope} and e.key = ${run.key} and exists (select 1 from started)
      returning 1
    )
    select s.scope, s.key, s.lease_token::text as token, s.attempts, (select count(*)::int from granted) as granted
      from started s`;
}

/** The coordinator's part: each partition's service and the bucket's tokens spent. */
function accountStatement(q: Queryable, clock: Clock, queue: string, partitions: readonly string[]) {
  const now = sqlNow(q, clock);
  return q`
    with served as (
      ${servedUpsert(q, queue, now, q`unnest(${partitions}::text[]) as t(partition)`)}
      returning 1
    ), spent as (
      update stepkey.queues
         set tokens = ${bucketTokens(q, now)} - ${partitions.length}::int,
             refilled_at = greatest(refilled_at, ${now})
       where name = ${queue} and rate_limit is not null
      returning 1
    )
    select (select count(*) from served) + (select count(*) from spent) as written`;
}
