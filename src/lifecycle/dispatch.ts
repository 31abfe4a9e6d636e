/**
 * Dispatch: which queued runs get the queue's free slots, decided in SQL.
 *
 * A dispatch of its own is three statements in one transaction:
 * lockQueueStatement and lockQueueRowStatement take the queue's lock (below),
 * then dispatchStatement — with a snapshot taken after the lock, so it sees
 * every slot granted by an earlier dispatch — counts the slots held, picks the
 * runs and starts them. An enqueue's and a completion's ride their
 * transactions (after the entry's lock, after handOffLockStatement), and a
 * completion's swap takes no lock (below). Order of precedence:
 *
 *   1. priority, higher first
 *   2. round-robin across partitions: every partition's first queued run
 *      (at that priority) before any partition's second
 *   3. the partition served least recently first
 *   4. first enqueued first
 *
 * restricted by the queue's concurrency, each partition's concurrency and the
 * rate bucket. The entry of a run that failed is skipped (it is not in the
 * waiting index) until a resume puts it back in line. Guarantee: under the
 * queue's lock, slots held never exceed the settings on the queue's row; a
 * slot given back (by a transaction that has not committed yet) is at worst
 * counted as still held, never the reverse. Without the lock, only a swap: a
 * completion's one slot, given back in its transaction, to one run (on a
 * queue without a rate or a limit per partition, as the queue's row says in
 * the swap's snapshot: a settings change committing meanwhile may see one
 * start under the settings before it), which leaves the count as it was.
 * Taking a slot and starting the run — a new lease token (minted by the
 * caller), status in_progress — are one statement, so a slot never exists without its run
 * executing somewhere, and a run that starts from a queue always holds one.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow, sqlStatementNow } from '../db/clock.js';
import type { Lease, RunColumns } from '../ledger/types.js';

export interface DispatchedRun {
  scope: string;
  key: string;
  token: string;
  attempts: number;
  /** A run started with nothing recorded yet (no step, no wait): what executing it needs, read in the dispatch (one PostgreSQL). */
  fresh?: FreshRun;
  /** An enqueue's own run, its slot taken at once (no dispatch's choice): it does not count against a dispatch's room. */
  atOnce?: true;
  /** Whether the dispatch that started it took every free slot and left runs due in line (one PostgreSQL): a backlog. */
  more?: boolean;
}

/** A dispatched run that has recorded nothing: its row as a load would read it, without the load. */
export interface FreshRun extends RunColumns {
  traceContext: string | null;
  /** stepkey's clock when it started (ms since the epoch). */
  startedAtMs: number;
}

/**
 * A queue's lock is taken in two parts. Whoever may grant a slot first
 * takes a transaction-scoped advisory lock on the queue's name
 * (lockQueueStatement), which excludes the others and writes nothing, and
 * then the queue row's lock (lockQueueRowStatement), the one lock that
 * earlier releases take, so that it excludes them too during a rolling
 * deploy. An entry may be added without either: whoever adds it without the
 * lock dispatches the queue after its commit. A dispatch of one queue first
 * waits for the lock's holder and looks, without a transaction
 * (worthDispatchingStatement); one that finds nothing waiting takes only the
 * advisory lock and commits without writing: the dispatch after a run's end
 * and a sweep of idle queues cost no WAL flush.
 */

/**
 * Takes the advisory locks of the queues in `names` that no other dispatch
 * holds (skipLocked), or waits for one queue's; returns the queues locked
 * (those that have a row). MATERIALIZED keeps the try-lock to the queues listed.
 */
export function lockQueueStatement(q: Queryable, names: readonly string[], skipLocked: boolean, plans: Plans) {
  if (skipLocked) {
    return q<{ name: string }[]>`
      with listed as materialized (select name from stepkey.queues where name = any(${names}::text[]))
      select name from listed, ${planMode(q, plans)} where pg_try_advisory_xact_lock(${queueLockKey(q, 'name')}) order by name`;
  }
  if (names.length !== 1) throw new Error('lockQueueStatement waits for one queue at a time.');
  return q<{ name: string }[]>`
    with listed as materialized (select name from stepkey.queues where name = ${names[0]!}::text)
    select name from listed, ${planMode(q, plans)}, lateral (select pg_advisory_xact_lock(${queueLockKey(q, 'name')})) locked`;
}

/**
 * 'generic': the dispatch that follows a queue's lock is planned once per
 * connection, not at each execution (its plan does not depend on the values:
 * a custom plan cost more to make than it saved) — and without sequential
 * scans (withoutSeqScans). Set for the rest of the transaction, which holds
 * only stepkey's statements from here on. 'custom' on Citus, which routes a
 * statement by its values and cannot plan one without them (a custom plan is
 * made with the tables' sizes at each execution).
 */
export type Plans = 'generic' | 'custom';
const planMode = (q: Queryable, plans: Plans) =>
  plans === 'generic'
    ? q`(select set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)) generic_plans`
    : q`(select 1) custom_plans`;

/**
 * Under the queue's advisory lock: takes its row's lock — only if a run waits
 * in it (`ifWaiting`: an empty answer then means there is nothing to
 * dispatch), or always (an enqueue, which adds its entry).
 */
export function lockQueueRowStatement(q: Queryable, queue: string, ifWaiting: boolean) {
  // With `ifWaiting`, the row taken is noted in the transaction (stepkey.dispatching) for a guarded
  // dispatch after it.
  return ifWaiting
    ? q<{ name: string }[]>`
        select name, set_config('stepkey.dispatching', name, true) is not null as noted from (
          select name from stepkey.queues
           where name = ${queue}
             and exists (select 1 from stepkey.queue_entries e where e.queue = ${queue} and not e.holding and not e.failed)
             for update) waiting`
    : q<{ name: string }[]>`select name from stepkey.queues where name = ${queue} for update`;
}

/** Whether `queue` seemed to have a free slot, in the statement's snapshot (its row is `queues`). */
const seemsFree = (q: Queryable, queue: string) =>
  q`(select count(*) from stepkey.queue_entries e where e.queue = ${queue} and e.holding) < queues.concurrency`;

/**
 * An enqueue's lock on Citus, taken only if free: the queue's advisory lock
 * and then its row's, in one statement; an empty answer means another
 * transaction is dispatching or enqueuing on the queue. One that does not
 * get it dispatches after its commit, waiting for the lock then (an entry
 * waiting is never a slot granted) — so that concurrent enqueues commit side
 * by side instead of one after another.
 */
export function tryLockQueueStatement(q: Queryable, queue: string, plans: Plans) {
  // The lock taken is noted in the transaction (stepkey.dispatching) for a guarded dispatch after it.
  // `free`: whether the queue seemed to have a free slot (its snapshot predates the lock: only a hint
  // for whether to dispatch now — a slot given back meanwhile is dispatched by whoever gave it back).
  return q`
    select set_config('stepkey.dispatching', name, true) as name,
           ${seemsFree(q, queue)} as free
      from stepkey.queues, ${planMode(q, plans)}
     where name = ${queue} and pg_try_advisory_xact_lock(${queueLockKey(q, 'name')})
       for update of queues`;
}

/**
 * A queued run's completion's lock: one row, whether a run waited in line
 * (in the statement's snapshot) and, only then, the lock as
 * tryLockQueueStatement takes it — `name` null when it was not taken. A
 * completion with no one to hand its slot to never holds the lock through
 * its commit; it looks after its commit instead (worthDispatchingStatement).
 */
export function handOffLockStatement(q: Queryable, queue: string, plans: Plans) {
  // CASE: the lock is tried only once a run is known to wait.
  return q<{ waiting: boolean; name: string | null }[]>`
    select w.waiting, l.name
      from (select exists (select 1 from stepkey.queue_entries e where e.queue = ${queue} and not e.holding and not e.failed) as waiting) w
      left join lateral (
        select set_config('stepkey.dispatching', name, true) as name
          from stepkey.queues, ${planMode(q, plans)}
         where name = ${queue} and case when w.waiting then pg_try_advisory_xact_lock(${queueLockKey(q, 'name')}) else false end
           for update of queues
      ) l on true`;
}

/**
 * Whether `queue` is worth a dispatch: one statement, no transaction of its
 * own. stepkey.worth_dispatching (migration 0018) waits until no
 * transaction holds the queue's lock, then looks in a snapshot taken after:
 * false means no run waits in line, due by its entry, while a slot is free,
 * once whoever held the lock has committed.
 */
export function worthDispatchingStatement(q: Queryable, clock: Clock, queue: string) {
  // `waiting`: any run in line, read in the statement's snapshot (taken before the barrier): a hint
  // for the process (Dispatcher), never the decision.
  // Planned without sequential scans (db/transaction.ts, WITHOUT_SEQ_SCANS): set first, in a subquery
  // of its own, for this statement's transaction only — the function's queries are planned under it.
  return q<{ worth: boolean; waiting: boolean }[]>`
    select stepkey.worth_dispatching(${queue}::text, ${clock.offsetMs}::float8) as worth,
           exists (select 1 from stepkey.queue_entries e where e.queue = ${queue} and not e.holding and not e.failed) as waiting
      from (select set_config('enable_seqscan', 'off', true)) without_seq_scans`;
}

/** The advisory lock key of the queue named by column `column`, apart from the keys' own (scope, chr(31), key). */
function queueLockKey(q: Queryable, column: string) {
  return q`hashtextextended('stepkey.queue' || chr(30) || ${q(column)}, 0)`;
}

/**
 * The parts of a dispatch's choice that both dispatches (this one and
 * dispatch-distributed.ts) share. The queue's bucket now, from its row: its
 * tokens refilled at rate_limit per rate_period_ms since refilled_at, never
 * above rate_limit (null without a rate).
 */
export const bucketTokens = (q: Queryable, now: ReturnType<typeof sqlNow>) => q`
  case when rate_limit is null then null
       else least(rate_limit::float8,
                  coalesce(tokens, rate_limit::float8)
                  + greatest(0, extract(epoch from ${now} - coalesce(refilled_at, ${now})) * 1000) * rate_limit / rate_period_ms)
  end`;

/**
 * The columns a run's start from the queue sets, after its lease token:
 * running under a lease from now; a queued run's wait ends here, a parked
 * run's own wait stays for its step to read.
 */
export const startedRunSet = (q: Queryable, now: ReturnType<typeof sqlNow>, leaseMs: number) => q`
  locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
  updated_at = ${now},
  wait_kind = nullif(l.wait_kind, 'slot'),
  wait_step = case when l.wait_kind = 'slot' then null else l.wait_step end,
  wait_for = case when l.wait_kind = 'slot' then null else l.wait_for end`;

/** Each partition's service, from `source` (a query with a `partition` column, a row per run started). */
export const servedUpsert = (q: Queryable, queue: string, now: ReturnType<typeof sqlNow>, source: ReturnType<typeof sqlNow>) => q`
  insert into stepkey.queue_partitions as p (queue, partition, last_served_at, served)
  select ${queue}, partition, ${now}, count(*) from ${source} group by partition
  on conflict (queue, partition) do update
     set last_served_at = excluded.last_served_at, served = p.served + excluded.served`;

/** The slots to grant now: none beyond the queue's concurrency (`held`), the `limit` asked for, or the bucket (`s`: settings). */
export const freeSlots = (q: Queryable, limit: number) => q`
  greatest(0, least(s.concurrency - coalesce((select sum(n) from held), 0), ${limit}::int, coalesce(floor(s.tokens), ${limit}::int)))::int`;

/**
 * The order of precedence over `ranked` r (rn: the run's place in its
 * partition), within each partition's concurrency (`held` h, settings s):
 * priority, partitions in turn, the partition served least recently (p),
 * first enqueued.
 */
export const queueOrder = (q: Queryable) => q`
  where s.per_partition is null or r.rn <= s.per_partition - coalesce(h.n, 0)
  order by r.priority desc, r.rn, p.last_served_at asc nulls first, r.seq`;

/** The rows of a dispatchStatement. */
export const dispatchedRuns = (rows: readonly unknown[] | undefined): DispatchedRun[] =>
  ((rows ?? []) as (DispatchedRun & { fresh?: FreshRun | null })[]).map(({ fresh, ...run }) => (fresh ? { ...run, fresh } : run));

/**
 * Starts up to `limit` queued runs of `queue` whose workflow version is in
 * `versions` (this process can execute them). Only under both of the queue's
 * locks — or, as a `swap`, in a completion's transaction that gave back its slot.
 */
export function dispatchStatement(
  q: Queryable,
  clock: Clock,
  queue: string,
  limit: number,
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
  options: { guarded?: boolean; unlessGranted?: Lease; swap?: boolean } = {},
) {
  // The statement's time: a dispatch riding a completion late in a long transaction sees the runs enqueued meanwhile.
  const now = sqlStatementNow(q, clock);
  // Each run started gets a lease token minted here (nothing volatile in the UPDATE).
  const tokens = Array.from({ length: Math.max(0, limit) }, () => randomUUID());
  // Guarded: sent in a pipeline after the statement that notes the queue in stepkey.dispatching
  // (lockQueueRowStatement when a run waits, handOffLockStatement when it took the lock, an enqueue's
  // entry when stepkey.slot_at_once took it), it starts
  // nothing and writes nothing unless that statement did (its own snapshot, taken after, sees every grant).
  // `unlessGranted`: the last entry of an enqueue's transaction took a free slot at once, under its
  // claim's lease token (flow/sql/enqueue.ts) — no run waited before it, so there is nothing more to
  // start. By its token: an older entry of the same key (a duplicate's run holding its slot) says nothing.
  const granted = options.unlessGranted
    ? q`and not exists (select 1 from stepkey.queue_entries g
                         where g.scope = ${options.unlessGranted.scope} and g.key = ${options.unlessGranted.key}
                           and g.holding and g.granted_token = ${options.unlessGranted.token}::uuid)`
    : q``;
  const locked = options.guarded
    ? q`current_setting('stepkey.dispatching', true) is not distinct from ${queue}::text ${granted}`
    : q`true`;
  // `swap`: sent by a queued run's completion that gave its own slot back earlier in the same
  // transaction, on a queue without a rate or a limit per partition: at most one run started, for the
  // one slot given back, so the slots held do not grow — no lock needed (a snapshot that misses grants
  // made meanwhile changes nothing it counts but its own slot). Otherwise the slots free now, only
  // under the queue's lock.
  const free = options.swap
    ? q`case when s.rate_limit is null and s.per_partition is null
             then least(${limit}::int, 1, greatest(0, s.concurrency - coalesce((select sum(n) from held), 0)))
             else 0 end`
    : q`case when ${locked} then ${freeSlots(q, limit)} else 0 end`;
  // A swap never touches the bucket (it runs only on a queue without a rate: a row that has one since
  // is not written without the lock).
  const spends = options.swap ? q`false` : locked;
  return q`
    with recursive queued_partitions(partition) as (
      (select partition from stepkey.queue_entries
        where queue = ${queue} and not holding and not failed order by partition limit 1)
      union all
      select (select e.partition from stepkey.queue_entries e
               where e.queue = ${queue} and not e.holding and not e.failed and e.partition > qp.partition
               order by e.partition limit 1)
        from queued_partitions qp where qp.partition is not null
    ), settings as (
      select concurrency, per_partition, rate_limit,
             ${bucketTokens(q, now)} as tokens
        from stepkey.queues where name = ${queue}
    ), held as (
      select partition, count(*)::int as n
        from stepkey.queue_entries
       where queue = ${queue} and holding
       group by partition
    ), free as (
      select ${free} as n
        from settings s
    ), parts as (
      -- The partitions with queued runs, by a skip scan of the waiting index (one probe per partition).
      select partition from queued_partitions where partition is not null
    ), ranked as (
      -- Each partition's first runs (no more than the free slots), in its own order.
      select c.scope, c.key, c.partition, c.priority, c.seq,
             row_number() over (partition by c.partition order by c.priority desc nulls last, c.seq) as rn
        from parts p
        cross join lateral (
          select e.scope, e.key, e.partition, e.priority, e.seq
            from stepkey.queue_entries e
            -- One primary-key probe per entry, in the index's order, until enough are found: the
            -- probe has only the key in its WHERE (offset 0 keeps the run's conditions out of it, or
            -- a plan could scan every waiting run through the partial index of parked runs).
            cross join lateral (
              select l.status, l.wait_kind, l.wake_at, l.name, l.version from stepkey.ledger l
               where l.scope = e.scope and l.key = e.key
              offset 0
            ) l
           where e.queue = ${queue} and e.partition = p.partition and not e.holding and not e.failed and e.not_before <= ${now}
             and l.status = 'waiting' and (l.wait_kind = 'slot' or l.wake_at <= ${now})
             and exists (select 1 from json_to_recordset(${JSON.stringify(versions)}::json) as v(name text, version int)
                          where v.name = l.name and v.version = l.version)
           order by e.priority desc nulls last, e.seq
           limit (select n from free)
        ) c
    ), chosen as (
      select r.scope, r.key
        from ranked r
        cross join settings s
        left join held h on h.partition = r.partition
        left join stepkey.queue_partitions p on p.queue = ${queue} and p.partition = r.partition
       ${queueOrder(q)}
       limit coalesce((select n from free), 0)
    ), locked as (
      -- Each chosen run's row locked by its primary key (the same probe as above), and its wait
      -- checked again on the row as locked: a swap's snapshot, taken without the queue's lock, may
      -- predate the run's start by another, and its park on a time not come yet.
      select l.scope, l.key
        from chosen c
        cross join lateral (
          select l.scope, l.key, l.status, l.wait_kind, l.wake_at from stepkey.ledger l
           where l.scope = c.scope and l.key = c.key
          offset 0
             for update skip locked
        ) l
       where l.status = 'waiting' and (l.wait_kind = 'slot' or l.wake_at <= ${now})
    ), numbered as (
      select scope, key, row_number() over () as n from locked
    ), started as (
      update stepkey.ledger l
         set status = 'in_progress',
             lease_token = (${JSON.stringify(tokens)}::json ->> (k.n::int - 1))::uuid,
             ${startedRunSet(q, now, leaseMs)}
        from numbered k
       where l.scope = k.scope and l.key = k.key
      returning l.scope, l.key, l.lease_token, l.attempts, l.name, l.version, l.input, l.last_error, l.root_key,
                l.parent_run, l.trace_context, l.deadline_at, l.wait_kind
    ), granted as (
      update stepkey.queue_entries e
         set holding = true, granted_at = ${now}, granted_token = s.lease_token
        from started s
       where e.scope = s.scope and e.key = s.key
      returning e.partition
    ), served as (
      ${servedUpsert(q, queue, now, q`granted`)}
    ), spent as (
      update stepkey.queues
         -- Never moved back: a transaction that began before the last refill does not credit its time again.
         set tokens = s.tokens - (select count(*) from started), refilled_at = greatest(refilled_at, ${now})
        from settings s
       where queues.name = ${queue} and s.rate_limit is not null and ${spends}
    )
    select s.scope, s.key, s.lease_token::text as token, s.attempts,
           -- A backlog (a hint): every free slot taken, and more entries due in line in the snapshot than
           -- runs started (still waiting there), read by index up to one past them. Not when slots stay
           -- free: the rest wait for their partition, or a process that runs their version.
           (select count(*) from started) >= (select n from free)
             and exists (select 1 from stepkey.queue_entries w
                          where w.queue = ${queue} and not w.holding and not w.failed and w.not_before <= ${now}
                         offset (select count(*) from started)) as more,
           -- A run with nothing recorded (no step, no attempt, no wait of its own): what executing it
           -- reads, so that it is not loaded again.
           case when s.wait_kind is null
                 and not exists (select 1 from stepkey.steps c where c.scope = s.scope and c.run_key = s.key)
                 and not exists (select 1 from stepkey.step_attempts a where a.scope = s.scope and a.run_key = s.key)
                then json_build_object(
                  'workflow', s.name, 'version', s.version, 'input', s.input, 'attempts', s.attempts, 'lastError', s.last_error,
                  'rootKey', s.root_key, 'parentRun', s.parent_run, 'traceContext', s.trace_context,
                  'deadlineAtMs', (extract(epoch from s.deadline_at) * 1000)::float8,
                  'startedAtMs', (extract(epoch from ${now}) * 1000)::float8)
           end as fresh
      from started s`;
}
