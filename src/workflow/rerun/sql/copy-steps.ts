/**
 * The rerun's start: the new run row's link to the run it reruns, and the
 * steps it takes from that run's record — copied under the new run's keys
 * (same names, outcomes and places in the record), in the transaction that
 * claims the new run, so the rerun never exists without them.
 *
 * `dueNow` leaves the new run's lease expired (and its executions at 0), so
 * that the next sweep of any worker takes it and executes it: the CLI starts
 * reruns without executing them.
 */
import type { Queryable } from '../../../db/connect.js';
import { type Clock, sqlNow } from '../../../db/clock.js';
import type { Lease } from '../../../ledger/types.js';

export interface CopiedStep {
  key: string;
  name: string;
  outcome: string;
  ok: boolean;
  attempts: number;
  seq: number | null;
}

export function linkRerunStatement(q: Queryable, clock: Clock, lease: Lease, of: string, from: string, dueNow: boolean) {
  const now = sqlNow(q, clock);
  return q`
    update stepkey.ledger
       set rerun_of = ${of}, rerun_from = ${from},
           locked_until = case when ${dueNow}::boolean then ${now} else locked_until end,
           attempts = case when ${dueNow}::boolean then 0 else attempts end
     where scope = ${lease.scope} and key = ${lease.key} and lease_token = ${lease.token}::uuid and status = 'in_progress'`;
}

export function copyStepsStatement(q: Queryable, clock: Clock, lease: Lease, steps: readonly CopiedStep[]) {
  const now = sqlNow(q, clock);
  return q`
    insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
    select ${lease.scope}, s.key, ${lease.key}, s.name, s.outcome, s.ok, s.attempts, s.seq, ${now}
      from json_to_recordset(${JSON.stringify(steps)}::json)
           as s(key text, name text, outcome text, ok boolean, attempts int, seq int)`;
}
