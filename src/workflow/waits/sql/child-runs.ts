/**
 * Child runs: a root row of their own (kind 'run'), keyed by the parent
 * step's derived key in the parent's scope, linked to the parent by
 * `parent_run` (not `parent_key`, which means "step of").
 *
 * Guarantees:
 * - A child is started once: its row is inserted (a plain INSERT, so a second
 *   start rolls the whole transaction back) in the transaction that records
 *   the parent's step — the parent waiting for it, or the ref it returned.
 * - A child's end wakes its parent without a lost wake-up (lifecycle/wake.ts):
 *   the ending transaction locks the parent's row before it marks the parent
 *   due, and only if the parent is parked on this child; a parent that
 *   decides to wait locks its own row before it reads the child.
 */
import type { Queryable } from '../../../db/connect.js';
import { type Clock, sqlNow } from '../../../db/clock.js';
import type { ResolvedDeadline } from '../../../lifecycle/deadline.js';

export interface ChildClaim {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  fingerprint: string;
  input: string;
  rootKey: string;
  parentRun: string;
  token: string;
  leaseMs: number;
  /** The trace context of the parent's execution, which the child's executions continue. */
  traceContext: string | null;
  /** The child's deadline (its workflow's), if it has one. */
  deadline?: ResolvedDeadline | undefined;
}

/**
 * The child's lease runs from the wall clock (statement_timestamp()), not from the
 * transaction's start: the parent's step may commit in a transaction that has
 * been open longer than a lease (a tx step before it), and a lease counted
 * from its start would have run out before the child's row is seen.
 */
export function insertChildStatement(q: Queryable, clock: Clock, child: ChildClaim) {
  const now = sqlNow(q, clock);
  const deadline = child.deadline;
  const deadlineAt = !deadline
    ? q`null::timestamptz`
    : 'inMs' in deadline
      ? q`${now} + ${deadline.inMs}::float8 * interval '1 millisecond'`
      : q`to_timestamp(${deadline.atMs}::float8 / 1000)`;
  return q`
    insert into stepkey.ledger
      (scope, key, kind, name, fingerprint, status, lease_token, locked_until, attempts,
       created_at, updated_at, version, input, root_key, parent_run, trace_context, deadline_at)
    values
      (${child.scope}, ${child.key}, 'run', ${child.workflow}, ${child.fingerprint}, 'in_progress',
       ${child.token}::uuid, statement_timestamp() + ${clock.offsetMs + child.leaseMs}::float8 * interval '1 millisecond', 1,
       ${now}, ${now}, ${child.version}::int, ${child.input}, ${child.rootKey}, ${child.parentRun}, ${child.traceContext}::text, ${deadlineAt})`;
}

export interface ChildRow {
  status: string;
  outcome: string | null;
  outcome_ok: boolean | null;
  last_error: string | null;
  name: string;
  version: number | null;
}

export function readChildStatement(q: Queryable, scope: string, key: string) {
  return q<ChildRow[]>`
    select status, outcome, outcome_ok, last_error, name, version
      from stepkey.ledger
     where scope = ${scope} and key = ${key} and kind = 'run'`;
}
