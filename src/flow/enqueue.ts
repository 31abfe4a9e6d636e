/**
 * engine.enqueue's transaction: the run's claim, its queue entry and its park
 * (waiting for a slot), committed together — on one PostgreSQL with those of
 * the other enqueues its process makes on the queue at the same time
 * (enqueue-group.ts, enqueueRuns below).
 *
 *   BEGIN; claim (scope, key)
 *   the entry — one statement, which first takes the queue's lock, waited
 *   for only if a slot seemed free, holds a slot at once if a slot is free
 *   and no run is due in line before it, and parks the run (wait_kind
 *   'slot') if not (flow/sql/enqueue.ts); under the lock, a dispatch of
 *   runs due before it, unless this process last saw none waiting (then
 *   its queue is dispatched after the commit if the entry waits); behind a
 *   backlog this process saw, no lock and no dispatch at all (the run waits,
 *   and its queue is dispatched after the commit: behindBacklog); COMMIT
 *
 * On one PostgreSQL all of it is one round trip (the claim sent first, the
 * entry written only if it inserted the run): a duplicate gets its
 * answer from it, nothing more written; a claim's rare paths (a failed run
 * resumed, an expired key or lease) take one more round trip, claim first.
 *
 * The queue's lock is held only while the server runs that batch, and only
 * by an enqueue that finds a slot free (and saw no backlog): it waits for the lock on the server,
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
import { errorCode, isConnectionError, translateDatabaseError } from '../errors/pg-errors.js';
import { claimRun, runClaimStatement } from '../lifecycle/claim.js';
import type { ClaimRequest, ClaimResult, KeyRef } from '../ledger/types.js';
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
  /**
   * Whether this process's last dispatch of the queue took every free slot
   * and left runs due in line (a hint: a backlog). The entry then takes no
   * lock and no slot at once, and the run waits (answered `queued`); its
   * queue is dispatched after the commit, which starts it in its turn — by
   * priority and partition, at once if that is now. With a backlog, the
   * lock taken by every enqueue that saw a slot free made the enqueues and
   * the dispatch after each end wait for one another while slots stood free.
   */
  behindBacklog?: boolean;
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
  const first = flow.dispatchesInline ? (await enqueuePipelined(sql, clock, flow, [request]))[0] : undefined;
  return afterPipelined(sql, clock, flow, request, first);
}

/**
 * Several enqueues on one queue in one transaction (one PostgreSQL; the
 * group of flow/enqueue-group.ts): their claims, then their entries, then
 * one dispatch, one round trip and one commit for all — the queue's lock
 * taken once, by the first entry that finds a slot free (none behind a
 * backlog: behindBacklog), and held for one
 * commit instead of one each. Claims first: a transaction never waits for
 * another's claim while it holds the queue's lock (a claim never waits: a key
 * another transaction is claiming is answered 'in progress'). Each request
 * gets what it would have alone; a request the batch could not answer (a
 * claim's rare paths) goes on alone. If the transaction fails with an error
 * of the database (a statement's, not the connection's), nothing of it was
 * written and each request is sent alone, in order, so that each gets its
 * own answer. Each request's claim is checked (ledger/claim.ts,
 * assertValidClaim) before it joins a group: a group fails only on the
 * database.
 */
export async function enqueueRuns(sql: Sql, clock: Clock, flow: FlowControl, requests: readonly EnqueueRequest[]): Promise<PromiseSettledResult<Enqueued>[]> {
  await flow.ready();
  if (requests.length === 1 || !flow.dispatchesInline) return Promise.allSettled(requests.map((request) => enqueueRun(sql, clock, flow, request)));
  let firsts: Pipelined[];
  try {
    firsts = await enqueuePipelined(sql, clock, flow, requests);
  } catch (error) {
    if (isConnectionError(error) || !/^[0-9A-Z]{5}$/.test(errorCode(error) ?? '')) {
      return requests.map(() => ({ status: 'rejected', reason: error }));
    }
    // One after another, in the order they came: their entries keep their places in line, and the
    // pool is not drained by a group's worth of transactions at once.
    const alone: PromiseSettledResult<Enqueued>[] = [];
    for (const request of requests) {
      try {
        alone.push({ status: 'fulfilled', value: await enqueueRun(sql, clock, flow, withoutRoom(request)) });
      } catch (reason) {
        alone.push({ status: 'rejected', reason });
      }
    }
    return alone;
  }
  return Promise.allSettled(requests.map((request, i) => afterPipelined(sql, clock, flow, withoutRoom(request), firsts[i])));
}

/**
 * A group's request sent alone (a claim's rare path after the batch, or each
 * request after the batch failed): the room the process gave the group is
 * its batch's only, so a request alone starts no run waiting in line in its
 * own transaction — a run of it that waits has its queue dispatched after
 * its commit (dispatchAfter), by the process, within its room. Its own run
 * still takes a free slot at once (unless behind a backlog: behindBacklog).
 */
const withoutRoom = (request: EnqueueRequest): EnqueueRequest => ({ ...request, capacity: 0 });

/** What the pipelined batch answered, or, for a claim's rare path, only what its dispatch started. */
type Pipelined = Enqueued | { dispatched: DispatchedRun[] };

async function afterPipelined(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest, first: Pipelined | undefined): Promise<Enqueued> {
  if (first && 'claim' in first) return first;
  const enqueued = await enqueueClaimed(sql, clock, flow, request);
  // Nothing, as the first batch took no lock without an entry; were it otherwise, those runs are this process's to execute.
  return first ? { ...enqueued, dispatched: [...first.dispatched, ...enqueued.dispatched] } : enqueued;
}

/**
 * Enqueues in one round trip (one PostgreSQL): BEGIN, the claims, the
 * entries (each written only if its claim inserted the run), the guarded
 * dispatch, COMMIT. A new run, a replay, a run in progress or parked and a
 * mismatch are answered here. For the rest — a failed run to resume, an
 * expired key or lease — no entry was written (and no lock taken: the entry
 * takes it), and the claimed path follows. The runs the dispatch started go
 * to the request whose run each is, the rest (and the dispatch after the
 * commit) to the last request answered here.
 */
async function enqueuePipelined(sql: Sql, clock: Clock, flow: FlowControl, requests: readonly EnqueueRequest[]): Promise<Pipelined[]> {
  const last = requests[requests.length - 1]!;
  const tx = await Transaction.begin(sql, { acquireTimeoutMs: last.leaseMs, withoutSeqScans: true });
  try {
    const claims = requests.map((request) => runClaimStatement(tx.sql, clock, request.claim, { leaseMs: request.leaseMs }));
    const entries = requests.map((request, i) => ({
      lease: { ...request.ref, token: claims[i]!.token },
      statement: insertEntryStatement(tx.sql, clock, request.ref, request.entry, claims[i]!.token, request.behindBacklog) as postgres.PendingQuery<postgres.Row[]>,
    }));
    const batch = flow.enqueueStatements(tx.sql, last.entry.queue, entries, last.capacity, last.leaseMs, last.versions, last.othersWaiting);
    const answers = await tx.commit(...claims.map((claim) => claim.statement), ...batch.statements);
    const entryAnswers = answers.slice(claims.length);
    const dispatched = batch.dispatched(entryAnswers);
    const results: Pipelined[] = requests.map((request, i) => {
      const claim = claims[i]!.answer(answers[i] as readonly unknown[]);
      const mine = dispatched.filter((run) => run.scope === request.ref.scope && run.key === request.ref.key);
      if (!claim) return { dispatched: mine };
      if (claim.state !== 'owned') return { claim, dispatched: mine, requeued: false };
      return { claim, requeued: false, dispatched: [...ownIfHolding(batch.holding(entryAnswers, i), request, claim), ...mine] };
    });
    // The rest of what the dispatch started, and the dispatch owed after the commit: the last request answered here takes them.
    const others = dispatched.filter((run) => !requests.some((request) => run.scope === request.ref.scope && run.key === request.ref.key));
    const taker = results.findLast((result) => 'claim' in result) ?? results[results.length - 1]!;
    results[results.indexOf(taker)] = { ...taker, dispatched: [...taker.dispatched, ...others], ...('claim' in taker ? { dispatchAfter: batch.afterCommit(entryAnswers) } : {}) };
    return results;
  } catch (error) {
    tx.abandon();
    throw translateDatabaseError(error, `enqueueing on queue '${last.entry.queue}'`);
  }
}

/** An enqueue's own run, if its entry took a free slot at once: it executes under the claim's lease. */
function ownIfHolding(holding: boolean, request: EnqueueRequest, claim: { lease: { token: string }; attempts: number }): DispatchedRun[] {
  return holding ? [{ scope: request.ref.scope, key: request.ref.key, token: claim.lease.token, attempts: claim.attempts, atOnce: true }] : [];
}

/** The enqueue whose claim goes first, on its own: on Citus, and for a claim's rare paths (a failed run resumed, an expired key or lease). */
async function enqueueClaimed(sql: Sql, clock: Clock, flow: FlowControl, request: EnqueueRequest): Promise<Enqueued> {
  const tx = await Transaction.begin(sql, { acquireTimeoutMs: request.leaseMs, withoutSeqScans: true });
  try {
    const claim = await claimRun(tx.sql, clock, request.claim, { leaseMs: request.leaseMs });
    if (claim.state === 'waiting' && claim.resumed) {
      const queue = claim.wait.for ?? request.entry.queue;
      await flow.lockIn(tx.sql, queue);
      const dispatched = await commitWithDispatch(tx, flow, queue, request, []);
      // No room to start it in (capacity 0): its queue is dispatched after the commit.
      return { claim, dispatched, requeued: true, dispatchAfter: request.capacity <= 0 };
    }
    if (claim.state !== 'owned' || claim.resumed) {
      if (claim.state === 'owned') await tx.commit();
      else tx.abandon();
      return { claim, dispatched: [], requeued: false };
    }
    if (flow.dispatchesInline) {
      // The entry and the dispatch in one round trip, as in the pipelined path.
      const entry = insertEntryStatement(tx.sql, clock, request.ref, request.entry, claim.lease.token, request.behindBacklog) as postgres.PendingQuery<postgres.Row[]>;
      const batch = flow.enqueueStatements(tx.sql, request.entry.queue, [{ lease: claim.lease, statement: entry }], request.capacity, request.leaseMs, request.versions, request.othersWaiting);
      const answers = await tx.commit(...batch.statements);
      return { claim, requeued: false, dispatched: [...ownIfHolding(batch.holding(answers, 0), request, claim), ...batch.dispatched(answers)], dispatchAfter: batch.afterCommit(answers) };
    }
    const entry = [
      insertEntryStatement(tx.sql, clock, request.ref, request.entry),
      parkStatement(tx.sql, clock, claim.lease, slotWait(request.entry.queue)),
    ] as const;
    const lock = await flow.tryLockIn(tx.sql, request.entry.queue);
    if (lock !== 'locked') {
      // Someone is dispatching or enqueuing on this queue: the entry commits without the lock, the
      // dispatch follows. Or every slot is held: the entry waits its turn (each slot's holder's
      // process looks after its end).
      await tx.commit(...entry);
      return { claim, dispatched: [], requeued: false, dispatchAfter: lock === 'held' };
    }
    const dispatched = await commitWithDispatch(tx, flow, request.entry.queue, request, entry);
    return { claim, dispatched, requeued: false, dispatchAfter: request.capacity <= 0 };
  } catch (error) {
    tx.abandon();
    throw translateDatabaseError(error, `enqueueing on queue '${request.entry.queue}'`);
  }
}

/** Sends `before`, dispatches `queue` and commits: on one PostgreSQL all with the COMMIT, on Citus step by step. */
async function commitWithDispatch(tx: Transaction, flow: FlowControl, queue: string, request: EnqueueRequest, before: readonly postgres.PendingQuery<postgres.Row[]>[]) {
  // No room to start a run in: nothing to dispatch (the caller dispatches after the commit).
  if (request.capacity <= 0) {
    await tx.commit(...before);
    return [];
  }
  if (flow.dispatchesInline) {
    const answers = await tx.commit(...before, flow.dispatchIn(tx.sql, queue, request.capacity, request.leaseMs, request.versions));
    return dispatchedRuns(answers[answers.length - 1] as readonly unknown[]);
  }
  await Promise.all(before);
  const dispatched = await flow.dispatchSteps(tx.sql, queue, request.capacity, request.leaseMs, request.versions);
  await tx.commit();
  return dispatched;
}
