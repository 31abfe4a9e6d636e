/**
 * engine.enqueue's transaction: the run's claim, its queue entry and its park
 * (waiting for a slot), committed together.
 *
 *   BEGIN; claim (scope, key)
 *   the entry — one statement, which first takes the queue's lock, waited
 *   for only if a slot seemed free, holds a slot at once if a slot is free
 *   and no run is due in line before it, and parks the run (wait_kind
 *   'slot') if not (flow/sql/enqueue.ts); under the lock, a dispatch of
 *   runs due before it, unless this process last saw none waiting (then
 *   its queue is dispatched after the commit if the entry waits); COMMIT
 *
 * On one PostgreSQL all of it is one round trip (the claim sent first, the
 * entry written only if it inserted the run): a duplicate gets its
 * answer from it, nothing more written; a claim's rare paths (a failed run
 * resumed, an expired key or lease) take one more round trip, claim first.
 *
 * The queue's lock is held only while the server runs that batch, and only
 * by an enqueue that finds a slot free: it waits for the lock on the server,
 * so that its run starts at once — its slot granted in its entry, under its
 * claim's lease (no park, no second start). Enqueues on a full queue take no
 * lock and commit side by side; an entry added without the lock has its
 * queue dispatched after the commit, by this process (Dispatcher), which
 * first waits for whoever holds the lock and costs no transaction when
 * nothing is to start.
 *
 * The same ref again after its run failed resumes it: the claim's takeover
 * parks it waiting for a slot instead (ledger/sql/takeover.ts), and the
 * queue is dispatched in the same transaction —
 * the resumed run starts at once only if a slot is free (`requeued`).
 *
 * On Citus the dispatch takes several statements (lifecycle/dispatch-distributed.ts),
 * sent one after another before the COMMIT instead of with it.
 */
import type postgres from 'postgres';
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction, type TxSql } from '../db/transaction.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { claimRun, runClaimStatement } from '../lifecycle/claim.js';
import type { ClaimRequest, ClaimResult, KeyRef, Lease } from '../ledger/types.js';
import { parkStatement } from '../lifecycle/park.js';
import type { FlowControl, Versions } from './flow-control.js';
import { slotWait } from '../lifecycle/slot-wait.js';
import { dispatchedRuns, type DispatchedRun } from '../lifecycle/dispatch.js';
import { insertEntryStatement, type EntryValues } from './sql/enqueue.js';

export interface EnqueueOptions {
  /** The queue (registered with the engine), by object or name. */
  queue: { name: string } | string;
  /** Whole number from -1000 to 1000 (default 0); higher starts first within the queue. */
  priority?: number;
  /** Not started before this many ms from now (default 0). */
  delayMs?: number;
}

export interface EnqueueRequest {
  ref: KeyRef;
  claim: ClaimRequest;
  entry: EntryValues;
  leaseMs: number;
  /** How many runs this process may start now. */
  capacity: number;
  /**
   * Whether runs may be waiting in line (a hint: runs were last seen
   * waiting, or it is not known): the batch then dispatches them under the
   * queue's lock; if not, and some were, the queue is dispatched after the commit.
   */
  othersWaiting: boolean;
  versions: Versions;
}

export type Enqueued = {
  claim: ClaimResult;
  dispatched: DispatchedRun[];
  /** The claim resumed a failed run: it is back in line for a slot. */
  requeued: boolean;
  /** The entry was added without the queue's lock, or waits with no dispatch in its batch: its queue is to be dispatched after the commit. */
  dispatchAfter?: boolean;
};

export async function enqueueRun(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued> {
  await flow.ready();
  // One PostgreSQL: the claim sent with the rest, one round trip in all, for a key not claimed before.
  const first = flow.dispatchesInline ? await enqueuePipelined(sql, clock, flow, request) : undefined;
  if (first && 'claim' in first) return first as Enqueued;
  const enqueued = await enqueueClaimed(sql, clock, flow, request);
  // Nothing, as the first batch took no lock without an entry; were it otherwise, those runs are this process's to execute.
  return first ? { ...enqueued, dispatched: [...first.dispatched, ...enqueued.dispatched] } : enqueued;
}

/**
 * The enqueue in one round trip (one PostgreSQL): BEGIN, the claim, the entry
 * (written only if the claim inserted the run), the guarded dispatch, COMMIT.
 * A new run, a replay, a run in progress or parked and a mismatch are
 * answered here. For the rest — a failed run to resume, an expired key or
 * lease — no entry was written (and no lock taken: the entry takes it), and
 * the claimed path follows.
 */
async function enqueuePipelined(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued | { dispatched: DispatchedRun[] }> {
  const tx = await Transaction.begin(sql, { acquireTimeoutMs: request.leaseMs });
  try {
    const claiming = runClaimStatement(tx.sql, clock, request.claim, { leaseMs: request.leaseMs });
    const lease = { ...request.ref, token: claiming.token };
    const batch = enqueueBatch(tx.sql, clock, flow, request, lease);
    const [claimed, ...answers] = await tx.commit(claiming.statement, ...batch.statements);
    const claim = claiming.answer(claimed);
    if (!claim) return { dispatched: batch.dispatched(answers) };
    if (claim.state !== 'owned') return { claim, dispatched: batch.dispatched(answers), requeued: false };
    return { claim, requeued: false, ...started(request, claim, batch, answers) };
  } catch (error) {
    tx.abandon();
    throw translateDatabaseError(error, `enqueueing on queue '${request.entry.queue}'`);
  }
}

/** The enqueue whose claim goes first, on its own: on Citus, and for a claim's rare paths (a failed run resumed, an expired key or lease). */
async function enqueueClaimed(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued> {
  const tx = await Transaction.begin(sql, { acquireTimeoutMs: request.leaseMs });
  try {
    const claim = await claimRun(tx.sql, clock, request.claim, { leaseMs: request.leaseMs });
    if (claim.state === 'waiting' && claim.resumed) {
      const queue = claim.wait.for ?? request.entry.queue;
      await flow.lockIn(tx.sql, queue);
      const dispatched = await commitWithDispatch(tx, flow, queue, request, []);
      return { claim, dispatched, requeued: true };
    }
    if (claim.state !== 'owned' || claim.resumed) {
      if (claim.state === 'owned') await tx.commit();
      else tx.abandon();
      return { claim, dispatched: [], requeued: false };
    }
    if (flow.dispatchesInline) {
      // The entry and the dispatch in one round trip, as in the pipelined path.
      const batch = enqueueBatch(tx.sql, clock, flow, request, claim.lease);
      const answers = await tx.commit(...batch.statements);
      return { claim, requeued: false, ...started(request, claim, batch, answers) };
    }
    const entry = [
      insertEntryStatement(tx.sql, clock, request.ref, request.entry),
      parkStatement(tx.sql, clock, claim.lease, slotWait(request.entry.queue)),
    ] as const;
    const lock = await flow.tryLockIn(tx.sql, request.entry.queue);
    if (lock !== 'locked') {
      // Someone is dispatching or enqueuing on this queue: the entry commits without the lock, the
      // dispatch follows. Or every slot is held: the entry waits its turn (each slot's holder hands
      // it over at its end).
      await tx.commit(...entry);
      return { claim, dispatched: [], requeued: false, dispatchAfter: lock === 'held' };
    }
    const dispatched = await commitWithDispatch(tx, flow, request.entry.queue, request, entry);
    return { claim, dispatched, requeued: false };
  } catch (error) {
    tx.abandon();
    throw translateDatabaseError(error, `enqueueing on queue '${request.entry.queue}'`);
  }
}

/**
 * An enqueue's batch (one PostgreSQL), sent after its claim: its entry —
 * written only for the run claimed under `lease` in this transaction; it
 * takes the queue's lock if a slot seemed free, holds its slot at once when
 * it may, and parks the run if not — and the dispatch after it
 * (FlowControl.enqueueStatements).
 */
function enqueueBatch(q: TxSql, clock: Clock, flow: FlowControl, request: EnqueueRequest, lease: Lease) {
  const entry = insertEntryStatement(q, clock, request.ref, request.entry, lease.token) as postgres.PendingQuery<postgres.Row[]>;
  return flow.enqueueStatements(q, request.ref, request.entry.queue, entry, request.capacity, request.leaseMs, request.versions, request.othersWaiting);
}

/**
 * What an enqueue's batch started: its own run, if its entry took a free
 * slot at once (it executes under the claim's lease), and what its dispatch
 * started; and whether its queue is to be dispatched after the commit.
 */
function started(
  request: EnqueueRequest,
  claim: { lease: Lease; attempts: number },
  batch: ReturnType<typeof enqueueBatch>,
  answers: readonly unknown[],
): { dispatched: DispatchedRun[]; dispatchAfter: boolean } {
  const own = batch.holding(answers) ? [{ scope: request.ref.scope, key: request.ref.key, token: claim.lease.token, attempts: claim.attempts }] : [];
  return { dispatched: [...own, ...batch.dispatched(answers)], dispatchAfter: batch.afterCommit(answers) };
}

/** Sends `before`, dispatches `queue` and commits: on one PostgreSQL all with the COMMIT, on Citus step by step. */
async function commitWithDispatch(tx: Transaction, flow: FlowControl, queue: string, request: EnqueueRequest, before: readonly postgres.PendingQuery<postgres.Row[]>[]) {
  if (flow.dispatchesInline) {
    const answers = await tx.commit(...before, flow.dispatchIn(tx.sql, queue, request.capacity, request.leaseMs, request.versions));
    return dispatchedRuns(answers[answers.length - 1] as readonly unknown[]);
  }
  await Promise.all(before);
  const dispatched = await flow.dispatchSteps(tx.sql, queue, request.capacity, request.leaseMs, request.versions);
  await tx.commit();
  return dispatched;
}
