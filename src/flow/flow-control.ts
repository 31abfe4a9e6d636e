/**
 * An engine's flow control: the queues it registers, their settings written
 * to the database once, and dispatch — after an enqueue, after one of its
 * queued runs ends (the slot it gave back goes to the next run at once), and
 * on every sweep (delayed runs come due, slots freed by other processes).
 */
import type postgres from 'postgres';
import type { Queryable, Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction, type TxSql } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import type { Queue } from './define-queue.js';
import type { Lease } from '../ledger/types.js';
import { dispatchStatement, dispatchedRuns, lockQueueRowStatement, lockQueueStatement, tryLockQueueStatement, handOffLockStatement, worthDispatchingStatement, type DispatchedRun, type Plans } from '../lifecycle/dispatch.js';
import { dispatchDistributed } from '../lifecycle/dispatch-distributed.js';
import { tablesDistributed } from '../db/citus.js';
import { writeQueueSettings } from './sql/settings.js';

export type Versions = readonly { name: string; version: number }[];
type PendingRows = postgres.PendingQuery<postgres.Row[]>;

export class FlowControl {
  readonly #sql: Sql;
  readonly #clock: Clock;
  readonly #queues = new Map<string, Queue>();
  #settings: Promise<void> | undefined;
  /** stepkey's tables are distributed by Citus (known once ready): dispatch takes its own steps. */
  #distributed = false;

  constructor(sql: Sql, clock: Clock, queues: readonly Queue[]) {
    this.#sql = sql;
    this.#clock = clock;
    for (const queue of queues) {
      if (queue?.kind !== 'stepkey.queue') {
        throw new StepkeyError('definition_error', 'Only queues made with defineQueue() can be registered.');
      }
      const other = this.#queues.get(queue.name);
      if (other && other !== queue) {
        throw new StepkeyError('definition_error', `Queue '${queue.name}' is registered twice with different definitions.`);
      }
      this.#queues.set(queue.name, queue);
    }
  }

  get enabled(): boolean {
    return this.#queues.size > 0;
  }

  get names(): string[] {
    return [...this.#queues.keys()];
  }

  /** The registered queue by object or name, or a clear error. */
  require(queue: Queue | string | undefined): Queue {
    const name = typeof queue === 'string' ? queue : queue?.name;
    const registered = name === undefined ? undefined : this.#queues.get(name);
    if (!registered) {
      const known = this.names;
      throw new StepkeyError(
        'invalid_options',
        `Queue '${String(name)}' is not registered with this engine (registered: ${known.length ? known.join(', ') : 'none'}); ` +
          'pass it in createEngine({ queues }).',
      );
    }
    return registered;
  }

  /** Writes every registered queue's settings to its row, and learns whether the tables are distributed, once per engine. */
  ready(): Promise<void> {
    this.#settings ??= Promise.all([writeQueueSettings(this.#sql, [...this.#queues.values()]), tablesDistributed(this.#sql)]).then(
      ([, distributed]) => {
        this.#distributed = distributed;
      },
      (error: unknown) => {
        this.#settings = undefined;
        throw translateDatabaseError(error, 'writing queue settings');
      },
    );
    return this.#settings;
  }

  /**
   * Whether a dispatch can travel inside another transaction's last
   * statements (an enqueue's, a completion's): on one PostgreSQL it is one
   * statement; on Citus it takes several (lifecycle/dispatch-distributed.ts),
   * so there the queue is dispatched right after that transaction instead.
   */
  get dispatchesInline(): boolean {
    return !this.#distributed;
  }

  /** How the statements after a queue's lock are planned (lifecycle/dispatch.ts, Plans). */
  get plans(): Plans {
    return this.#distributed ? 'custom' : 'generic';
  }

  /** Within an open transaction (an enqueue's): takes both of the queue's locks, then dispatches (the last statement, sent with COMMIT). */
  async lockIn(tx: TxSql, queue: string): Promise<void> {
    await Promise.all([lockQueueStatement(tx, [queue], false, this.plans), lockQueueRowStatement(tx, queue, false)]);
  }

  /**
   * Within an open transaction (an enqueue's): takes both of the queue's
   * locks if no one holds them ('held' if someone does), and says whether a
   * slot seemed free ('locked') or not ('full': nothing to dispatch now).
   */
  async tryLockIn(tx: TxSql, queue: string): Promise<'locked' | 'full' | 'held'> {
    const [row] = await tryLockQueueStatement(tx, queue, this.plans);
    if (!row) return 'held';
    return row.free ? 'locked' : 'full';
  }

  /** The dispatch as one statement, to send with the COMMIT (only where dispatchesInline). */
  dispatchIn(tx: TxSql, queue: string, limit: number, leaseMs: number, versions: Versions) {
    return dispatchStatement(tx, this.#clock, queue, limit, leaseMs, versions);
  }

  /** The dispatch on Citus, its statements one after another (only where not dispatchesInline). */
  dispatchSteps(tx: TxSql, queue: string, limit: number, leaseMs: number, versions: Versions): Promise<DispatchedRun[]> {
    return dispatchDistributed(tx, this.#clock, queue, limit, leaseMs, versions);
  }

  /**
   * A queued run's completion's hand-off, sent in the batch that ends
   * with its COMMIT (one PostgreSQL; a queue of one slot: handOffCount).
   * On a queue without a rate or a limit per partition, a swap: one
   * dispatch that starts at most one run, for the slot the completion
   * gave back, with no lock (lifecycle/dispatch.ts). Otherwise the
   * queue's lock if a run waits in line and no one holds the lock (its
   * answer: { waiting, name }, handOffLockStatement), and a dispatch that
   * starts runs only if that lock was taken — held only while the server
   * runs the batch. Either way the last answer is the runs started; a
   * completion whose swap starts none, or that does not take the lock, is
   * followed by a look after its commit (`dispatch`). None on Citus (see
   * dispatchSteps).
   */
  handOffStatements(q: Queryable, queue: string, limit: number, leaseMs: number, versions: Versions): PendingRows[] {
    const count = this.handOffCount(queue);
    if (count === 0) return [];
    if (count === 1) return [dispatchStatement(q, this.#clock, queue, limit, leaseMs, versions, { swap: true })];
    return [
      handOffLockStatement(q, queue, this.plans) as unknown as PendingRows,
      dispatchStatement(q, this.#clock, queue, limit, leaseMs, versions, { guarded: true }),
    ];
  }

  /**
   * How many statements handOffStatements sends for `queue`: a swap's one,
   * the lock's and its dispatch's two; none on Citus, and none on a queue of
   * more than one slot. There the ends of its runs come close together, and
   * a hand-off in each end's commit made them wait for one another (each
   * writes the queue's shared rows and locks the runs it may start, until its
   * commit's WAL flush): their process's look after the commit, one at a time
   * per queue, starts the runs for every slot given back meanwhile in one
   * dispatch (measured at concurrency 8: 1.25–1.5× the runs/s). On a queue
   * of one slot, an end and the next start come one after the other anyway,
   * and the hand-off saves the look's two round trips.
   */
  handOffCount(queue: string): number {
    const settings = this.#queues.get(queue);
    if (!this.dispatchesInline || !settings || settings.concurrency > 1) return 0;
    return settings.perPartition === null && settings.rateLimit === null ? 1 : 2;
  }

  /**
   * The entries of enqueues on `queue` in one transaction (one PostgreSQL),
   * after their claims (flow/sql/enqueue.ts: each that tries for a slot at once
   * — none behind a backlog — takes the queue's lock if a slot seemed free
   * — the first to take it holds it for the rest — may take
   * a free slot at once, and answers { holding, locked }), and with
   * `inBatch` (runs may wait in line) a dispatch that starts runs only if the
   * lock was taken and the last entry did not take a slot under its claim's
   * lease (`lease`: runs waited before it, or it wrote no entry).
   * `holding(answers, i)` says whether entry i took its slot,
   * `dispatched(answers)` what the dispatch started, `afterCommit(answers)`
   * whether the queue is to be dispatched after the commit (an entry waits,
   * and no dispatch under the lock followed it in the batch).
   */
  enqueueStatements(q: Queryable, queue: string, entries: readonly { lease: Lease; statement: PendingRows }[], limit: number, leaseMs: number, versions: Versions, othersWaiting: boolean) {
    const last = entries[entries.length - 1]!;
    // No room to start a run in: no dispatch in the batch; an entry that waits has its queue dispatched after the commit.
    const inBatch = othersWaiting && limit > 0;
    const statements = inBatch
      ? [...entries.map((entry) => entry.statement), dispatchStatement(q, this.#clock, queue, limit, leaseMs, versions, { guarded: true, unlessGranted: last.lease })]
      : entries.map((entry) => entry.statement);
    // An entry's one row, or none: its claim did not insert the run (a duplicate, a mismatch).
    const answer = (answers: readonly unknown[], i: number) => (answers[i] as { holding: boolean; locked: boolean }[] | undefined)?.[0];
    const written = (answers: readonly unknown[]) => entries.map((_, i) => answer(answers, i)).filter((row) => row !== undefined);
    return {
      statements,
      holding: (answers: readonly unknown[], i: number) => answer(answers, i)?.holding === true,
      dispatched: (answers: readonly unknown[]) => (inBatch ? dispatchedRuns(answers[entries.length] as readonly unknown[]) : []),
      // The lock, once taken, is noted for the rest of the transaction: the dispatch after the last entry ran under it.
      afterCommit: (answers: readonly unknown[]) => {
        const rows = written(answers);
        return rows.some((row) => !row.holding) && !(inBatch && rows.some((row) => row.locked));
      },
    };
  }

  /**
   * A dispatch of `queue` as one batch with its COMMIT (one PostgreSQL): its
   * lock, waited for on the server; its row's if a run waits in it; and a
   * dispatch that starts runs only if that row was taken. Only in a
   * transaction of its own (no step's statement timeout applies to the wait).
   */
  #lockedDispatch(q: Queryable, queue: string, limit: number, leaseMs: number, versions: Versions): PendingRows[] {
    return [
      lockQueueStatement(q, [queue], false, this.plans) as unknown as PendingRows,
      lockQueueRowStatement(q, queue, true) as unknown as PendingRows,
      dispatchStatement(q, this.#clock, queue, limit, leaseMs, versions, { guarded: true }),
    ];
  }

  /** Whether a run waits in `queue` while a slot seems free, once no transaction holds its lock (lifecycle/dispatch.ts); and whether any run waited in line. */
  async #look(queue: string): Promise<{ worth: boolean; waiting: boolean }> {
    try {
      const [row] = await worthDispatchingStatement(this.#sql, this.#clock, queue);
      return { worth: row?.worth ?? false, waiting: row?.waiting ?? true };
    } catch (error) {
      throw translateDatabaseError(error, 'dispatching queued runs');
    }
  }

  /**
   * Dispatches `queue` (or, skipping queues another process is dispatching,
   * every registered queue) up to `limit` runs. Returns the runs started,
   * each with its queue: this process executes them; `idle` when a look at
   * one queue, or its row's check under the lock, found no run in line.
   */
  async dispatch(
    limit: number,
    leaseMs: number,
    versions: Versions,
    queue?: string,
    look = true,
  ): Promise<{ queue: string; runs: DispatchedRun[]; idle?: true }[]> {
    if (limit <= 0 || !this.enabled) return [];
    await this.ready();
    // One queue on one PostgreSQL: most dispatches after an end or an enqueue find nothing to start,
    // and cost one statement then, no transaction — unless the caller expects runs to start (`look`
    // false: its last dispatch started some), when the look would only delay the dispatch.
    if (queue && this.dispatchesInline && look) {
      const look = await this.#look(queue);
      if (!look.worth) return [{ queue, runs: [], ...(look.waiting ? {} : { idle: true as const }) }];
    }
    const tx = await Transaction.begin(this.#sql, { acquireTimeoutMs: leaseMs });
    try {
      if (queue && this.dispatchesInline) {
        // One queue on one PostgreSQL: one batch, the lock held only while the server runs it.
        const answers = await tx.commit(...this.#lockedDispatch(tx.sql, queue, limit, leaseMs, versions));
        // The queue's row not taken: no run waited in line, as a look would have said.
        const idle = (answers[1] as readonly unknown[]).length === 0;
        return [{ queue, runs: dispatchedRuns(answers[2] as readonly unknown[]), ...(idle ? { idle: true as const } : {}) }];
      }
      // One queue: its row check travels with its lock, and runs once the lock is held (a statement of its own, its own snapshot).
      const [locked, checked] = queue
        ? await Promise.all([lockQueueStatement(tx.sql, [queue], false, this.plans), lockQueueRowStatement(tx.sql, queue, true)])
        : [await lockQueueStatement(tx.sql, this.names, true, this.plans), undefined];
      if (locked.length === 0) {
        await tx.rollback();
        return [];
      }
      const results: { queue: string; runs: DispatchedRun[] }[] = [];
      let left = limit;
      let committed = false;
      for (const [index, { name }] of locked.entries()) {
        if (left <= 0) break;
        // Nothing waits: nothing to dispatch, and no row lock (this transaction writes nothing for it).
        if ((checked ?? (await lockQueueRowStatement(tx.sql, name, true))).length === 0) continue;
        const last = index === locked.length - 1;
        if (this.#distributed) {
          const runs = await this.dispatchSteps(tx.sql, name, left, leaseMs, versions);
          results.push({ queue: name, runs });
          left -= runs.length;
          continue;
        }
        const statement = dispatchStatement(tx.sql, this.#clock, name, left, leaseMs, versions);
        const runs = dispatchedRuns(last ? (await tx.commit(statement))[0] : await statement);
        committed = last;
        results.push({ queue: name, runs });
        left -= runs.length;
      }
      if (!committed) await tx.commit();
      return results;
    } catch (error) {
      tx.abandon();
      throw translateDatabaseError(error, 'dispatching queued runs');
    }
  }
}
