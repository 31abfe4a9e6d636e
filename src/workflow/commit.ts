/**
 * Committing what a run has written. Three kinds of work wait for a commit:
 *
 *   the run's start    its claim, folded into its first write (state.opening)
 *   the last tx step   its transaction, writes and step row done, left open
 *                      until the next step boundary (state.deferred): when the
 *                      run ends right after it, its completion rides along
 *   recorded values    ctx.now / ctx.uuid rows (state.pending)
 *
 * `commitWaiting` commits all of it — plus whatever the caller adds — in one
 * transaction. Every step row in it is fenced by the run's lease; if the
 * lease is gone, or another holder committed one of those steps first, the
 * whole transaction rolls back and this process stops the run (another holds
 * it, or it restarts from what the ledger holds).
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import { Transaction } from '../db/transaction.js';
import { isConnectionError, isLeaseLost, isUniqueViolation, translateDatabaseError } from '../errors/pg-errors.js';
import { faultPoint } from '../faults/fault-points.js';
import { RunStopped } from './errors.js';
import type { RunState } from './run-state.js';
import { insertStepRowsStatement, type StepRow } from './sql/step-rows.js';
import { refreshLeaseStatement } from '../ledger/sql/finish.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

export interface CommitExtra {
  /** More step rows (the step that is being recorded). */
  rows?: StepRow[];
  /** More statements, built on the committing transaction. */
  statements?: (q: Queryable) => Statement[];
}

export async function commitWaiting(state: RunState, extra: CommitExtra = {}): Promise<void> {
  const carriesStart = state.startPending;
  const deferred = state.takeDeferred();
  const transaction = deferred?.transaction ?? state.takeOpening();
  const rows = [...(deferred?.rows ?? []), ...state.takePending(), ...(extra.rows ?? [])];
  // The start's lease was measured when the claim ran, and no heartbeat covers a row not yet
  // committed: a start that waited long commits with a fresh lease.
  const staleStart = carriesStart && Date.now() - state.claimedAt > state.deps.leaseMs / 3;
  const build = (q: Queryable): Statement[] => [
    ...(rows.length ? [insertStepRowsStatement(q, state.deps.clock, state.lease, rows)] : []),
    ...(staleStart ? [refreshLeaseStatement(q, state.deps.clock, state.lease, state.deps.leaseMs)] : []),
    ...(extra.statements?.(q) ?? []),
  ];
  try {
    if (transaction) {
      await transaction.commit(...build(transaction.sql));
    } else {
      const statements = build(state.deps.sql);
      if (statements.length === 1) await statements[0];
      else if (statements.length > 1) {
        const fresh = await Transaction.begin(state.deps.sql);
        await fresh.commit(...build(fresh.sql));
      }
    }
  } catch (error) {
    // Whatever failed here is lost: the run must not go on as if it had committed.
    if (isLeaseLost(error)) {
      state.stop('lease_lost');
      throw new RunStopped('lease_lost');
    }
    if (isUniqueViolation(error) || isConnectionError(error)) {
      // Another holder committed one of these steps first, or the connection went: start
      // again from what the ledger holds.
      state.stop('conflict');
      throw new RunStopped('conflict');
    }
    // Anything else (a transaction aborted by a statement the step caught, a deferred
    // constraint) fails the run — resumable once the code is fixed.
    const failure = translateDatabaseError(error, 'recording a run');
    state.halt(failure);
    throw failure;
  }
  for (const row of rows) state.finished.set(row.name, row);
  if (deferred) faultPoint('engine.after-step-commit', deferred.label);
}

/** Commits the last tx step (and the values recorded since) before the next step runs. */
export async function commitDeferred(state: RunState): Promise<void> {
  if (state.deferred) await commitWaiting(state);
}
