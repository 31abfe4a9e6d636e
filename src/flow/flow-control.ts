/**
 * An engine's flow control: the queues it registers, their settings written
 * to the database once, and dispatch — after an enqueue, after one of its
 * queued runs ends (the slot it gave back goes to the next run at once), and
 * on every sweep (delayed runs come due, slots freed by other processes).
 */
import type { Queryable, Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction, type TxSql } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import type { Queue } from './define-queue.js';
import { dispatchStatement, dispatchedRuns, lockQueueRowStatement, lockQueueStatement, tryLockQueueStatement, type DispatchedRun } from '../lifecycle/dispatch.js';
import { writeQueueSettings } from './sql/settings.js';

export type Versions = readonly { name: string; version: number }[];

export class FlowControl {
  readonly #sql: Sql;
  readonly #clock: Clock;
  readonly #queues = new Map<string, Queue>();
  #settings: Promise<void> | undefined;

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

  /** Writes every registered queue's settings to its row, once per engine. */
  ready(): Promise<void> {
    this.#settings ??= writeQueueSettings(this.#sql, [...this.#queues.values()]).catch((error: unknown) => {
      this.#settings = undefined;
      throw translateDatabaseError(error, 'writing queue settings');
    });
    return this.#settings;
  }

  /** Within an open transaction (an enqueue's): takes both of the queue's locks, then dispatches (the last statement, sent with COMMIT). */
  async lockIn(tx: TxSql, queue: string): Promise<void> {
    await Promise.all([lockQueueStatement(tx, [queue], false), lockQueueRowStatement(tx, queue, false)]);
  }

  /**
   * Within an open transaction (an enqueue's): takes both of the queue's
   * locks if no one holds them ('held' if someone does), and says whether a
   * slot seemed free ('locked') or not ('full': nothing to dispatch now).
   */
  async tryLockIn(tx: TxSql, queue: string): Promise<'locked' | 'full' | 'held'> {
    const [row] = await tryLockQueueStatement(tx, queue);
    if (!row) return 'held';
    return row.free ? 'locked' : 'full';
  }

  dispatchIn(tx: TxSql, queue: string, limit: number, leaseMs: number, versions: Versions) {
    return dispatchStatement(tx, this.#clock, queue, limit, leaseMs, versions);
  }

  /**
   * The hand-over of a slot, sent last in a transaction that gives one back
   * (a queued run's completion): the queue's lock if no one holds it, and a
   * dispatch that starts runs only if that lock was taken.
   */
  handOffStatements(q: Queryable, queue: string, limit: number, leaseMs: number, versions: Versions) {
    return [tryLockQueueStatement(q, queue), dispatchStatement(q, this.#clock, queue, limit, leaseMs, versions, { guarded: true })];
  }

  /**
   * Dispatches `queue` (or, skipping queues another process is dispatching,
   * every registered queue) up to `limit` runs. Returns the runs started,
   * each with its queue: this process executes them.
   */
  async dispatch(
    limit: number,
    leaseMs: number,
    versions: Versions,
    queue?: string,
  ): Promise<{ queue: string; runs: DispatchedRun[] }[]> {
    if (limit <= 0 || !this.enabled) return [];
    await this.ready();
    const tx = await Transaction.begin(this.#sql, { acquireTimeoutMs: leaseMs });
    try {
      // One queue: its row check travels with its lock, and runs once the lock is held (a statement of its own, its own snapshot).
      const [locked, checked] = queue
        ? await Promise.all([lockQueueStatement(tx.sql, [queue], false), lockQueueRowStatement(tx.sql, queue, true)])
        : [await lockQueueStatement(tx.sql, this.names, true), undefined];
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
        const statement = dispatchStatement(tx.sql, this.#clock, name, left, leaseMs, versions);
        const last = index === locked.length - 1;
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
