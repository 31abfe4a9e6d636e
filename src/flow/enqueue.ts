/**
 * engine.enqueue's transaction: the run's claim, its queue entry and either
 * the slot granted at once or its park (waiting for a slot), committed
 * together. On one PostgreSQL, for a key not claimed before, one round trip:
 *
 *   BEGIN; the claim's insert           (nothing after it writes if the key was taken)
 *   the queue's lock: exclusive if a slot seemed free, shared otherwise
 *   the entry, holding a slot if the queue has room and no run waits in line
 *   the park unless the slot was granted; COMMIT
 *
 * A run granted its slot goes on here under its claim's lease: it starts at
 * once, with no dispatch. The lock is held only while the server runs the
 * batch; a shared one lets enqueues onto a full queue commit side by side,
 * and makes a slot's hand-off (which waits for it exclusively) see their
 * entries. The queue is dispatched after the commit only when a slot was
 * free and this enqueue could not take it (shared lock, runs ahead).
 *
 * A key taken (a duplicate, an expired key, a failed run) goes the full way,
 * in a transaction of its own: the claim, then the rest. The same ref again
 * after its run failed resumes it: the claim's takeover parks it waiting for
 * a slot instead (ledger/sql/takeover.ts), and the queue is dispatched in the
 * same transaction — the resumed run starts at once only if a slot is free
 * (`requeued`).
 *
 * On Citus the dispatch takes several statements (lifecycle/dispatch-distributed.ts):
 * an enqueue tries the queue's lock, and one that finds it held never waits
 * (the queue is dispatched after its commit).
 */
import type postgres from 'postgres';
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction } from '../db/transaction.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { claimRun, vacantRunClaimStatement } from '../lifecycle/claim.js';
import type { ClaimRequest, ClaimResult, KeyRef } from '../ledger/types.js';
import { parkStatement } from '../lifecycle/park.js';
import type { FlowControl, Versions } from './flow-control.js';
import { slotWait } from '../lifecycle/slot-wait.js';
import { dispatchedRuns, type DispatchedRun } from '../lifecycle/dispatch.js';
import { insertEntryStatement, type EntryValues } from './sql/enqueue.js';
import type { EntryGrant } from '../lifecycle/enqueue-grant.js';
import { StepkeyError } from '../errors/stepkey-error.js';

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
  versions: Versions;
}

export type Enqueued = {
  claim: ClaimResult;
  dispatched: DispatchedRun[];
  /** The claim resumed a failed run: it is back in line for a slot. */
  requeued: boolean;
  /** The entry was added without the queue's lock: its queue is to be dispatched now. */
  dispatchAfter?: boolean;
};

export async function enqueueRun(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued> {
  await flow.ready();
  if (flow.dispatchesInline) {
    const enqueued = await enqueueVacant(sql, clock, flow, request);
    if (enqueued) return enqueued;
  }
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
      // A key forgotten (it had expired) and claimed anew: the vacant claim's batch, after its claim.
      const batch = flow.grantStatements(tx.sql, claim.lease, request.entry);
      const grant = batch.grant(await tx.commit(...batch.statements));
      return { claim, requeued: false, ...granted(request, claim.lease.token, claim.attempts, grant) };
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
 * The enqueue of a key not claimed before (one PostgreSQL), in one round
 * trip: BEGIN, the claim's insert, the queue's lock if free, the entry —
 * granted a slot if the queue has room and no run waits in line — the park
 * unless granted, COMMIT. A run granted its slot goes on under its claim's
 * lease. Undefined when the key was taken (nothing was written): the full
 * enqueue follows. The queue is to be dispatched after the commit if this
 * enqueue did not get the lock (a slot given back meanwhile may not have seen
 * its entry) or found a slot free with runs waiting ahead of its own.
 */
async function enqueueVacant(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued | undefined> {
  const tx = await Transaction.begin(sql, { acquireTimeoutMs: request.leaseMs });
  try {
    const claiming = vacantRunClaimStatement(tx.sql, clock, request.claim, { leaseMs: request.leaseMs });
    const lease = { ...request.ref, token: claiming.token };
    const batch = flow.grantStatements(tx.sql, lease, request.entry);
    const [inserted, ...answers] = await tx.commit(claiming.statement, ...batch.statements);
    const claim = claiming.owned(inserted);
    const grant = batch.grant(answers);
    if (claim?.state !== 'owned') return undefined;
    return { claim, requeued: false, ...granted(request, claiming.token, claim.attempts, grant) };
  } catch (error) {
    tx.abandon();
    throw translateDatabaseError(error, `enqueueing on queue '${request.entry.queue}'`);
  }
}

/**
 * What a grant's answer means for the enqueue: its run started (granted a
 * slot) or not, and whether the queue is to be dispatched after the commit —
 * when the enqueue could not grant (its lock was shared) but found a slot
 * free, or found one free with runs waiting ahead of its own.
 */
function granted(request: EnqueueRequest, token: string, attempts: number, grant: EntryGrant | undefined): Pick<Enqueued, 'dispatched' | 'dispatchAfter'> {
  if (!grant?.entered) {
    throw new StepkeyError('database_error', `The entry of run '${request.ref.key}' on queue '${request.entry.queue}' was not written.`);
  }
  return {
    dispatched: grant.granted ? [{ ...request.ref, token, attempts }] : [],
    dispatchAfter: !grant.granted && grant.room && (!grant.locked || grant.ahead),
  };
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
