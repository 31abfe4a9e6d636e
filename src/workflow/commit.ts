/**
 * Committing what a run has written. Four kinds of work wait for a commit:
 *
 *   the run's start    its claim, folded into its first write (state.buffer.opening)
 *   the last tx step   its transaction, writes and step row done, left open
 *                      until the next step boundary (state.buffer.deferred): when the
 *                      run ends right after it, its completion rides along
 *   recorded values    ctx.now / ctx.uuid rows (state.buffer.pending)
 *   attempt writes     the effect record: an attempt's end or resolution
 *                      (state.buffer.pendingAttempts), and whatever the caller adds
 *                      (an attempt's start rides the commit before its call)
 *
 * `commitWaiting` commits all of it — plus whatever the caller adds — in one
 * transaction, with a limit slot's give-back when a step that holds one is
 * recorded (or, on Citus, the run's slots after a transition that moves it). Every step row in it is fenced by the run's lease; if the
 * lease is gone, or another holder committed one of those steps first, the
 * whole transaction rolls back and this process stops the run (another holds
 * it, or it restarts from what the ledger holds).
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import { Transaction, type TxSql } from '../db/transaction.js';
import {
  isConnectionError,
  isLeaseLost,
  isTransientConflict,
  isUniqueViolation,
  translateDatabaseError,
} from '../errors/pg-errors.js';
import { faultPoint } from '../faults/fault-points.js';
import { RunStopped, isUnavailable } from './errors.js';
import type { RunState } from './run-state.js';
import { insertStepRowsStatement, type StepRow, type StepRowsFence } from './sql/step-rows.js';
import type { OutcomeToStore } from '../ledger/types.js';
import { refreshRunLeaseStatement } from '../lifecycle/leases.js';
import { storeTraceContextStatement } from './sql/trace-context.js';
import type { AttemptWrite } from './effects/attempts.js';
import type { HandOff } from './slot-handoff.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

export interface CommitExtra {
  /** More step rows (the step that is being recorded). */
  rows?: StepRow[];
  /** Writes to the effect record (an attempt's start, end or resolution). */
  attempts?: AttemptWrite[];
  /** More statements, built on the committing transaction, sent after the step rows. */
  statements?: (q: Queryable) => Statement[];
  /**
   * The run's outcome: stored by the statement that writes the step rows, its
   * fenced UPDATE of the run row fencing them (see sql/step-rows.ts).
   */
  complete?: { outcome: OutcomeToStore; retentionMs: number };
}

/**
 * Runs on the committing transaction before its last statements are built:
 * statements whose answers decide what to commit (a wait that locks its run
 * and reads its mailbox, say). It returns what to add to the commit.
 */
export type Prepare = (q: TxSql) => Promise<CommitExtra>;

export async function commitWaiting(state: RunState, extra: CommitExtra = {}, prepare?: Prepare): Promise<void> {
  state.control.progress(state.deps.leaseMs);
  const carriesStart = state.buffer.startPending;
  const deferred = state.buffer.takeDeferred();
  let transaction = deferred?.transaction ?? state.buffer.takeOpening();
  const pending = state.buffer.takePending();
  const rows = [...(deferred?.rows ?? []), ...pending, ...(extra.rows ?? [])];
  const attempts = [...state.buffer.takePendingAttempts(), ...(extra.attempts ?? [])];
  const placed = (list: StepRow[]) => list.map((row) => ({ ...row, seq: row.seq ?? state.record.seqOf(row.name) }));
  // The start's lease was measured when the claim ran, and no heartbeat covers a row not yet
  // committed: a start that waited long (by stepkey's clock, which a test may move) commits with a fresh lease.
  const staleStart = carriesStart && Date.now() + state.deps.clock.offsetMs - state.control.claimedAt > state.deps.leaseMs / 3;
  // The start's own transaction inserted the run's row: nobody else can touch it before COMMIT.
  const fence: StepRowsFence = extra.complete
    ? { kind: 'complete', ...extra.complete }
    : carriesStart
      ? { kind: 'ownStart' }
      : { kind: 'share' };
  // A limit slot held by a step recorded here is given back in the same commit — before a
  // completion in it, whose trigger would give it back without naming the waiter it wakes.
  let giveBack: Statement | undefined;
  // On Citus: the run's slots given back on the coordinator if this commit moves the run.
  let release: Statement | undefined;
  // Sent last with a completion: the run's queue slot handed to the next queued run (slot-handoff.ts).
  // Asked once; its statements built only on the connection that sends them.
  const handOff: HandOff | undefined = extra.complete ? state.deps.slotHandOff?.withCompletion(state.lease) : undefined;
  const build = (q: Queryable, more: CommitExtra, withHandOff = true): Statement[] => {
    const handing = withHandOff && handOff ? handOff.statements(q) : [];
    const all = placed([...rows, ...(more.rows ?? [])]);
    const writes = [...attempts, ...(more.attempts ?? [])];
    const recording = all.length || writes.length || extra.complete;
    giveBack = state.deps.limits?.giveBackWith(state, q, all);
    release = !giveBack && (extra.complete || extra.statements || more.statements) ? state.deps.limits?.releaseWith(state, q) : undefined;
    return [
      // Before the step rows: a completion among them gives the lease up, which this update requires.
      ...(state.buffer.traceToStore ? [storeTraceContextStatement(q, state.lease, state.buffer.traceToStore)] : []),
      ...(giveBack ? [giveBack] : []),
      ...(recording ? [insertStepRowsStatement(q, state.deps.clock, state.lease, all, writes, fence)] : []),
      ...(staleStart && !extra.complete ? [refreshRunLeaseStatement(q, state.deps.clock, state.lease, state.deps.leaseMs)] : []),
      ...(extra.statements?.(q) ?? []),
      ...(more.statements?.(q) ?? []),
      ...(release ? [release] : []),
      ...handing,
    ];
  };
  let answers: readonly unknown[] = [];
  let committed: StepRow[] = rows;
  let written: AttemptWrite[] = attempts;
  try {
    if (prepare && !transaction) transaction = await Transaction.begin(state.deps.sql, { acquireTimeoutMs: state.deps.leaseMs });
    if (transaction) {
      const more = prepare ? await prepare(transaction.sql) : {};
      committed = [...rows, ...(more.rows ?? [])];
      written = [...attempts, ...(more.attempts ?? [])];
      answers = await transaction.commit(...build(transaction.sql, more));
    } else {
      // Counted first, without the hand-off's (its dispatch is the costliest to build): one statement
      // goes alone, more in a transaction of their own, built again on its connection.
      const statements = build(state.deps.sql, {}, false);
      const count = statements.length + (handOff?.count ?? 0);
      if (count === 1) answers = [await statements[0]];
      else if (count > 1) {
        const fresh = await Transaction.begin(state.deps.sql, { acquireTimeoutMs: state.deps.leaseMs });
        answers = await fresh.commit(...build(fresh.sql, {}));
      }
    }
  } catch (error) {
    transaction?.abandon();
    // Whatever failed here is lost: the run must not go on as if it had committed.
    if (isLeaseLost(error)) {
      state.control.stop('lease_lost');
      throw new RunStopped('lease_lost');
    }
    // Records with no writes of their own (recorded values, a woken timer's end) wait for the next
    // commit again, so that the one that ends this execution (a failed run's) keeps them. Not after
    // a lost lease: no commit of this execution can write them.
    state.buffer.pending.unshift(...pending);
    if (isUniqueViolation(error) || isConnectionError(error) || isUnavailable(error) || isTransientConflict(error)) {
      // Another holder committed one of these steps first, the connection went, or Postgres
      // chose this transaction as a deadlock's victim: start again from what the ledger holds.
      state.control.stop('conflict');
      throw new RunStopped('conflict');
    }
    // Anything else (a transaction aborted by a statement the step caught, a deferred
    // constraint) fails the run — resumable once the code is fixed.
    const failure = translateDatabaseError(error, 'recording a run');
    state.control.halt(failure);
    throw failure;
  }
  state.buffer.traceToStore = undefined;
  for (const row of committed) state.record.finished.set(row.name, row);
  state.record.applyAttempts(written, Date.now() + state.deps.clock.offsetMs, state.lease.token);
  if (handOff && handOff.count > 0) handOff.after(answers.slice(-handOff.count));
  await state.deps.limits?.afterGiveBack(state, giveBack);
  await state.deps.limits?.afterRelease(state, release);
  if (deferred) faultPoint('engine.after-step-commit', deferred.label);
}

/** Commits the last tx step (and the values recorded since) before the next step runs. */
export async function commitDeferred(state: RunState): Promise<void> {
  if (state.buffer.deferred) await commitWaiting(state);
}
