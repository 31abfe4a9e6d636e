/**
 * A child run's claim: the child comes into being as running, under a lease
 * of the parent's process, in the transaction that records the parent's
 * step (workflow/waits/children.ts) — the parent parked on it, or the ref it
 * returned. Its row is keyed by the parent step's derived key, in the
 * parent's scope, and linked to the parent by `parent_run` (not
 * `parent_key`, which means "step of").
 *
 * Guarantee: a child is started once — a plain INSERT, so a second start
 * rolls the whole transaction back (the parent's step with it). The lease
 * runs from the wall clock (statement_timestamp()), not from the
 * transaction's start: the parent's step may commit in a transaction that
 * has been open longer than a lease (a tx step before it), and a lease
 * counted from its start would have run out before the child's row is seen.
 * The child's deadline (its workflow's) is computed in the statement, from
 * the database's clock.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { ResolvedDeadline } from './deadline.js';

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
