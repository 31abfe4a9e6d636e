/**
 * The sweeps: the only statements of a run's life that look across scopes.
 * Each finds runs that no process is moving and hands them to one:
 *
 *   expired and due   runs whose lease ran out (their process died or
 *                     stalled) are taken over, and parked runs that are due
 *                     are taken (woken): a new lease, this process executes them
 *   past deadline     runs that have not ended and whose deadline has passed —
 *                     parked on anything, failed, or whose process died — are
 *                     picked, and each is ended at its deadline by its own
 *                     transaction (tree.ts), whatever its version
 *
 * A queue's runs are started by its dispatch (dispatch.ts), under the queue's lock.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { queuedWithoutSlot } from './queued.js';

export interface SweptRun {
  scope: string;
  key: string;
  token: string;
  attempts: number;
  /** A parked run that was due (not a lease that expired). */
  woken?: boolean;
  /** The queue whose slot the run holds (a takeover keeps it), or null. */
  queue: string | null;
}

/**
 * The sweeper's takeover: runs whose lease expired, and parked runs that are
 * due, get a new lease token (one of `tokens`, minted by the caller: nothing
 * volatile in the UPDATE) and belong to this process. Failed runs are not
 * touched: they resume when their caller retries. A run on a queue that has
 * no slot is left to the queue's dispatch, and a run past its deadline to the
 * deadline sweep. Only runs of a workflow version in `versions` are taken:
 * during a deploy, a process of the old release leaves the new release's runs
 * to the processes that run them.
 *
 * Two statements, so that the cross-scope part only reads (on Citus it reads
 * every shard; a locking read across shards is refused there): candidates are
 * found without a lock, then taken by one fenced UPDATE that names each
 * one's scope and key and decides again under the row lock. Guarantee: each run goes to exactly one sweeper — a second sweeper
 * that found the same run finds it no longer expired or due and takes
 * nothing — and the new token fences out the process that died (or stalled)
 * holding the old one. A woken run keeps its wait columns: the waiting step
 * reads them when the run reaches it again.
 */
export async function sweepExpiredRuns(
  q: Queryable,
  clock: Clock,
  tokens: readonly string[],
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
  deadlines = 0,
  options: { skipLocked?: boolean } = {},
): Promise<{ taken: SweptRun[]; pastDeadline: KeyRef[] }> {
  const limit = tokens.length;
  if (limit === 0 && deadlines === 0) return { taken: [], pastDeadline: [] };
  const found = await findSweepable(q, clock, limit, deadlines, versions);
  const pastDeadline = found.filter((row) => row.kind === 'deadline').map(({ scope, key }) => ({ scope, key }));
  const sweepable = found.filter((row) => row.kind !== 'deadline').map(({ scope, key, kind }) => ({ scope, key, woken: kind === 'due' }));
  if (sweepable.length === 0) return { taken: [], pastDeadline };
  return { taken: await takeSwept(q, clock, sweepable, tokens, leaseMs, versions, options.skipLocked ?? false), pastDeadline };
}

/** `name chr(31) version` of each registered workflow version: the form the sweep compares. */
function versionTags(versions: readonly { name: string; version: number }[]): string[] {
  return versions.map((v) => `${v.name}\u001f${v.version}`);
}

/**
 * Up to `limit` expired and due runs, and up to `deadlines` runs past their
 * deadline (pastDeadlineQuery's), across scopes, read without a lock: one
 * statement per sweep.
 */
function findSweepable(q: Queryable, clock: Clock, limit: number, deadlines: number, versions: readonly { name: string; version: number }[]) {
  const now = sqlNow(q, clock);
  const tags = versionTags(versions);
  return q<{ scope: string; key: string; kind: 'expired' | 'due' | 'deadline' }[]>`
    (select scope, key, case when woken then 'due' else 'expired' end as kind from (
      (select scope, key, false as woken
         from stepkey.ledger
        where kind = 'run' and status = 'in_progress' and locked_until <= ${now}
          and (deadline_at is null or deadline_at > ${now})
          and (name || chr(31) || version::text) = any(${tags}::text[])
        order by locked_until
        limit ${limit})
      union all
      (select scope, key, true as woken
         from stepkey.ledger
        where status = 'waiting' and wake_at <= ${now} and not ${queuedWithoutSlot(q, 'ledger')}
          and (deadline_at is null or deadline_at > ${now})
          and (name || chr(31) || version::text) = any(${tags}::text[])
        order by wake_at
        limit ${limit})
    ) found
    limit ${limit})
    union all
    (${pastDeadlineQuery(q, now, deadlines)})`;
}

/**
 * Takes the candidates that are still expired or due, each by its (scope,
 * key): on PostgreSQL one primary-key probe each, on Citus each shard's rows
 * on that shard (one statement for the batch, whatever the number of scopes).
 * `skipLocked` (one PostgreSQL): a candidate another sweeper is taking is
 * skipped, not waited for — sweepers of a backlog that read the same oldest
 * runs each take what the others do not. Citus runs no locking read across
 * shards: there a sweeper waits for such a row and then finds it taken.
 */
function takeSwept(
  q: Queryable,
  clock: Clock,
  found: readonly { scope: string; key: string; woken: boolean }[],
  tokens: readonly string[],
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
  skipLocked: boolean,
) {
  const now = sqlNow(q, clock);
  const tag = (row: { scope: string; key: string }) => `${row.scope}\u001f${row.key}`;
  const tags = found.map(tag);
  const due = found.filter((row) => row.woken).map(tag);
  const mine = tokens.slice(0, found.length) as string[];
  const lTag = q`(l.scope || chr(31) || l.key)`;
  const pairs = q`select * from unnest(${found.map((row) => row.scope)}::text[], ${found.map((row) => row.key)}::text[])`;
  return q<SweptRun[]>`
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = (${mine}::uuid[])[array_position(${tags}::text[], ${lTag})],
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = l.attempts + (l.status = 'in_progress')::int,
           updated_at = ${now}
     where (l.scope, l.key) in ${skipLocked ? q`(select c.scope, c.key from stepkey.ledger c where (c.scope, c.key) in (${pairs}) for update skip locked)` : q`(${pairs})`}
       and (l.deadline_at is null or l.deadline_at > ${now})
       and (l.name || chr(31) || l.version::text) = any(${versionTags(versions)}::text[])
       and ((not ${lTag} = any(${due}::text[]) and l.kind = 'run' and l.status = 'in_progress' and l.locked_until <= ${now})
         or (${lTag} = any(${due}::text[]) and l.status = 'waiting' and l.wake_at <= ${now} and not ${queuedWithoutSlot(q, 'l')}))
    returning l.scope, l.key, l.lease_token::text as token, l.attempts, ${lTag} = any(${due}::text[]) as woken,
              (select e.queue from stepkey.queue_entries e where e.scope = l.scope and e.key = l.key and e.holding) as queue`;
}

/**
 * Runs that have not ended and whose deadline has passed: waiting, failed, or
 * in progress with a lease that ran out (a live process ends its own). Read
 * without a lock (a read across scopes): each is then ended by its own
 * transaction, which decides again under its lock (tree.ts).
 */
function pastDeadlineQuery(q: Queryable, now: ReturnType<typeof sqlNow>, limit: number) {
  return q`
    select scope, key, 'deadline' as kind
      from stepkey.ledger
     where deadline_at <= ${now} and status in ('in_progress', 'waiting', 'failed')
       and (status <> 'in_progress' or locked_until <= ${now})
     order by deadline_at
     limit ${limit}`;
}
