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
 * volatile in the UPDATE) and belong to this process. Guarantee: each goes to
 * exactly one sweeper — rows another sweeper is taking are skipped (SKIP
 * LOCKED), and the new token fences out the process that died (or stalled)
 * holding the old one. A woken run keeps its wait columns: the waiting step
 * reads them when the run reaches it again. Failed runs are not touched: they
 * resume when their caller retries. A run on a queue that has no slot is left
 * to the queue's dispatch, and a run past its deadline to the deadline sweep.
 * Only runs of a workflow version in `versions` are taken: during a deploy, a
 * process of the old release leaves the new release's runs to the processes
 * that run them.
 */
export async function sweepExpiredRuns(
  q: Queryable,
  clock: Clock,
  tokens: readonly string[],
  leaseMs: number,
  versions: readonly { name: string; version: number }[],
) {
  const now = sqlNow(q, clock);
  const registered = JSON.stringify(versions);
  const limit = tokens.length;
  return q<SweptRun[]>`
    with expired as (
      select scope, key
        from stepkey.ledger
       where kind = 'run' and status = 'in_progress' and locked_until <= ${now}
         and (deadline_at is null or deadline_at > ${now})
         and exists (select 1 from json_to_recordset(${registered}::json) as v(name text, version int)
                      where v.name = ledger.name and v.version = ledger.version)
       order by locked_until
       limit ${limit}
       for update skip locked
    ), due as (
      select scope, key
        from stepkey.ledger
       where status = 'waiting' and wake_at <= ${now} and not ${queuedWithoutSlot(q, 'ledger')}
         and (deadline_at is null or deadline_at > ${now})
         and exists (select 1 from json_to_recordset(${registered}::json) as v(name text, version int)
                      where v.name = ledger.name and v.version = ledger.version)
       order by wake_at
       limit ${limit}
       for update skip locked
    ), taken as (
      select scope, key, woken, row_number() over () as n
        from (select scope, key, false as woken from expired
              union all
              select scope, key, true from due
              limit ${limit}) t
    )
    update stepkey.ledger l
       set status = 'in_progress',
           lease_token = (${JSON.stringify(tokens)}::json ->> (t.n::int - 1))::uuid,
           locked_until = ${now} + ${leaseMs}::float8 * interval '1 millisecond',
           attempts = l.attempts + (not t.woken)::int,
           updated_at = ${now}
      from taken t
     where l.scope = t.scope and l.key = t.key
    returning l.scope, l.key, l.lease_token::text as token, l.attempts, t.woken,
              (select e.queue from stepkey.queue_entries e where e.scope = l.scope and e.key = l.key and e.holding) as queue`;
}

/**
 * Runs that have not ended and whose deadline has passed: waiting, failed, or
 * in progress with a lease that ran out (a live process ends its own). Locked
 * (SKIP LOCKED) only while this statement runs: each is then ended by its own
 * transaction, which decides again under its lock (tree.ts).
 */
export async function runsPastDeadline(q: Queryable, clock: Clock, limit: number): Promise<KeyRef[]> {
  const now = sqlNow(q, clock);
  return q<KeyRef[]>`
    select scope, key
      from stepkey.ledger
     where deadline_at <= ${now} and status in ('in_progress', 'waiting', 'failed')
       and (status <> 'in_progress' or locked_until <= ${now})
     order by deadline_at
     limit ${limit}
       for update skip locked`;
}
