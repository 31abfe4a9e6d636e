/**
 * Transactions on a reserved connection, with their edges pipelined.
 *
 * postgres.js's `sql.begin` waits for BEGIN before the first statement and for
 * the last statement before COMMIT. Here BEGIN travels with the first
 * statement and COMMIT with the last one, so a transaction of one statement
 * costs one round trip less on each side. The price is that the last
 * statements must fail loudly rather than return zero rows (the commit is
 * already on the wire): fenced writes raise an error when their lease is gone.
 *
 * The connection given to the body is a reserved postgres.js connection with
 * `savepoint()` added, so drizzle's nested transactions work on it.
 */
import type postgres from 'postgres';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Sql } from './connect.js';
import { healthOf, type HeldReservation, type PoolHealth } from './pool-health.js';
import { DEFAULT_ACQUIRE_TIMEOUT_MS, reserveWithin } from './reserve.js';

/** What the body of a transaction queries with. */
export type TxSql = postgres.ReservedSql & Pick<postgres.TransactionSql, 'savepoint'>;
type Pending = postgres.PendingQuery<postgres.Row[]>;

/** The parts of postgres.js's internal connection object that a transaction reads and sets (its BEGIN's onexecute hands it over). */
interface PooledConnection {
  onclose?: () => void;
  /** Set per reservation while reserved; null once released or closed. */
  reserved?: unknown;
  /** Ends the connection: its queries in flight are rejected, the server rolls its transaction back. */
  terminate?: () => void;
}

/** The transaction that last sent BEGIN on each of postgres.js's connections (see Transaction.begin). */
const owners = new WeakMap<PooledConnection, Transaction>();

/** The parts of a postgres.js Query that a transaction follows (see the note on Transaction). */
interface TrackedQuery {
  executed: boolean;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  /** postgres.js's executor, called when the query is executed (not when it is built). */
  handler?: ((query: TrackedQuery) => unknown) & { debug?: unknown };
}

/**
 * For a transaction of stepkey's statements only: none is planned with a
 * sequential scan. A plan cached by a connection (a generic plan, a
 * PL/pgSQL function's) is made with the tables' sizes of that moment; one
 * made while the ledger or a queue's entries were a few rows would read them
 * whole at every execution once they have grown. Every such statement has an
 * index to use.
 */
export const WITHOUT_SEQ_SCANS = 'set local enable_seqscan = off';

/** SET LOCAL statement_timeout, for the rest of the transaction (or until its savepoint is rolled back to). */
export function statementTimeout(ms: number): string {
  return `set local statement_timeout = ${Math.max(1, Math.ceil(ms))}`;
}

function quiet<T extends Promise<unknown>>(query: T): T {
  query.catch(() => {});
  return query;
}

/**
 * Errors of a query that mean its connection's socket is gone (closed, reset, or its backend
 * terminated): nothing more may be sent on it. Not CONNECTION_ENDED or CONNECTION_DESTROYED,
 * which a pool that is ending reports on connections still open: those must still be given back,
 * or the pool's end waits for them forever.
 */
const LOST = new Set(['CONNECTION_CLOSED', 'ECONNRESET', 'EPIPE', '57P01', '57P02', '57P03']);

/** A query's own error (postgres.js's, never wrapped) that says its connection is gone. */
function connectionLost(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && LOST.has(code);
}

function connectionClosed(): Error {
  return Object.assign(new Error('The connection of this transaction was closed.'), { code: 'CONNECTION_CLOSED' });
}

/**
 * postgres.js 3.4 crashes the process (porsager/postgres#1208) when a query is
 * sent on a reserved connection whose socket has closed, leaves a query sent
 * just before such a close (after the socket's error) pending forever, and
 * corrupts its pool if such a connection is released. So the transaction
 * learns of the close the way `sql.begin` does — through the `onexecute` hook
 * of its BEGIN, which hands over the connection so that its `onclose` can be
 * set — then rejects its queries still in flight, refuses further ones, and
 * leaves the dead connection to the pool, which has already taken it back.
 */
export class Transaction implements HeldReservation {
  readonly sql: TxSql;
  /** true once COMMIT has been answered. */
  committed = false;
  #connection: postgres.ReservedSql;
  #open = true;
  #dead = false;
  #released = false;
  #savepoints = 0;
  /** Queries made through this transaction and not settled yet. */
  readonly #inFlight = new Set<TrackedQuery>();
  /** postgres.js's connection, and the reservation it carried when BEGIN was sent on it (see #ours). */
  #internal: PooledConnection | undefined;
  #reservation: unknown;
  /** The last executor wrapped by #checked, and its wrapper. */
  #executor: { raw: NonNullable<TrackedQuery['handler']>; checked: NonNullable<TrackedQuery['handler']> } | undefined;

  /** The pool's health record, which counts this transaction among the reservations held until it gives its own back. */
  readonly #health: PoolHealth;

  private constructor(connection: postgres.ReservedSql, health: PoolHealth) {
    this.#connection = connection;
    this.#health = health;
    health.held.add(this);
    this.sql = this.#guarded(connection);
  }

  /** Whether this transaction is dead and its connection still carries its reservation (nobody can use it). */
  holdsDeadReservation(): boolean {
    return this.#dead && this.#internal !== undefined && this.#internal.reserved === this.#reservation;
  }

  /**
   * Reserves a connection and sends BEGIN without waiting for it — with
   * `statementTimeoutMs`, in the same message as a SET LOCAL of
   * statement_timeout, so that no statement of the transaction runs longer.
   * Waiting for the connection is bounded by `acquireTimeoutMs` (default
   * 10 s): past it, `database_unavailable`.
   */
  static async begin(pool: Sql, options: { statementTimeoutMs?: number; acquireTimeoutMs?: number; withoutSeqScans?: boolean } = {}): Promise<Transaction> {
    const connection = await reserveWithin(pool, options.acquireTimeoutMs ?? DEFAULT_ACQUIRE_TIMEOUT_MS);
    const transaction = new Transaction(connection, healthOf(pool));
    const onexecute = (internal: PooledConnection) => {
      const other = owners.get(internal);
      owners.set(internal, transaction);
      internal.onclose = () => transaction.#died();
      transaction.#internal = internal;
      transaction.#reservation = internal.reserved;
      if (other && other !== transaction && !other.#released && !other.#dead) {
        // postgres.js 3.4 handed one connection to two reservations at once: this BEGIN joined the
        // other transaction on the server. Neither may go on or commit the other's work: both are
        // dead, and the connection is ended, so that the server rolls back what either wrote and the
        // pool opens a clean one. Ended at the next check phase, once this BEGIN has been flushed:
        // ended with a write batched, postgres.js would keep the batch for the slot's next
        // connection, which would then never send its startup (see socket.ts).
        transaction.#health.sharedConnections += 1;
        other.#died();
        transaction.#died();
        setImmediate(() => internal.terminate?.());
      }
      return true;
    };
    const begin = ['begin', ...(options.statementTimeoutMs ? [statementTimeout(options.statementTimeoutMs)] : []), ...(options.withoutSeqScans ? [WITHOUT_SEQ_SCANS] : [])].join('; ');
    quiet(transaction.#track(connection.unsafe(begin, [], { onexecute } as never)).execute());
    return transaction;
  }

  /** Sends statements now, without waiting: they run before whatever is sent next. */
  pipeline(...statements: string[]): Promise<unknown> {
    return quiet(Promise.all(statements.map((text) => this.sql.unsafe(text).execute())));
  }

  /**
   * Sends `last` (built but not awaited) and COMMIT together, and waits for
   * both. If any of `last` fails, Postgres turns the COMMIT into a ROLLBACK and
   * the first failure is thrown.
   */
  async commit<T extends readonly Pending[]>(...last: T): Promise<{ [K in keyof T]: Awaited<T[K]> }> {
    this.#ensureOpen();
    this.#open = false;
    try {
      this.#checkOurs();
      if (this.#dead) throw connectionClosed();
      const sent = last.map((query) => quiet(query.execute()));
      const commit = quiet(this.#statement('commit').execute());
      const settled = await Promise.allSettled([...sent, commit]);
      const failed = settled.find((result) => result.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
      const committed = (settled[settled.length - 1] as PromiseFulfilledResult<postgres.RowList<postgres.Row[]>>).value;
      if (committed.command !== 'COMMIT') {
        throw new StepkeyError(
          'database_error',
          'The transaction was aborted by an earlier failed statement (caught without a savepoint) and rolled back.',
        );
      }
      this.committed = true;
      return settled.slice(0, -1).map((result) => (result as PromiseFulfilledResult<unknown>).value) as never;
    } finally {
      this.#release();
    }
  }

  /** Rolls back and waits for it. */
  async rollback(): Promise<void> {
    if (!this.#open) return;
    this.#open = false;
    try {
      if (!this.#dead) await this.#statement('rollback');
    } catch {
      // The connection is gone: so is the transaction.
    } finally {
      this.#release();
    }
  }

  /**
   * Rolls back without making the caller wait. The connection goes back to
   * the pool only once the ROLLBACK has been answered: postgres.js sends a
   * query a microtask after it is issued, so a connection released at once
   * could carry this ROLLBACK into its next user's transaction.
   */
  abandon(): void {
    if (!this.#open) return;
    this.#open = false;
    this.#checkOurs();
    if (this.#dead) {
      this.#release();
      return;
    }
    const release = () => this.#release();
    this.#statement('rollback').then(release, release);
  }

  #release(): void {
    this.#health.held.delete(this);
    this.#released = true;
    this.#inFlight.clear();
    // Released only while it is still ours: postgres.js's release hands the connection object to the
    // next waiter, and after a close that object may already serve someone else.
    if (!this.#dead && this.#ours()) this.#connection.release();
  }

  /**
   * Whether the connection is still this transaction's. postgres.js marks a
   * connection reserved with a function of that reservation's own, clears it
   * when the connection closes, and sets another when the (reconnected)
   * object is reserved again: any other value means the connection went away,
   * whether or not its close was reported here. Unknown until BEGIN is sent.
   */
  #ours(): boolean {
    return this.#internal === undefined || this.#internal.reserved === this.#reservation;
  }

  /** Dead if, before its end, its connection is no longer ours (#ours): nothing more is sent, in-flight queries are rejected. */
  #checkOurs(): void {
    if (!this.#dead && !this.#released && !this.#ours()) this.#died();
  }

  #died(): void {
    this.#dead = true;
    for (const query of this.#inFlight) if (query.executed) query.reject(connectionClosed());
    this.#inFlight.clear();
  }

  /** Follows a query until it settles (fragments, never executed, are never touched). */
  #track<T>(query: T): T {
    const candidate = query as unknown as TrackedQuery;
    if (!candidate || typeof candidate.reject !== 'function' || typeof candidate.resolve !== 'function') return query;
    const { resolve, reject, handler } = candidate;
    // A query is sent when it is executed, which may come after the connection closed or went back
    // to the pool (a query built earlier and awaited later): refused then, never written to it.
    if (typeof handler === 'function') candidate.handler = this.#checked(handler);
    candidate.resolve = (value) => {
      this.#inFlight.delete(candidate);
      return resolve(value);
    };
    candidate.reject = (error) => {
      this.#inFlight.delete(candidate);
      // A query that failed because the connection went away: so did the transaction, even when
      // its close was not reported to it (nothing more is sent on that connection).
      if (connectionLost(error)) this.#dead = true;
      return reject(error);
    };
    this.#inFlight.add(candidate);
    return query;
  }

  /**
   * postgres.js's executor wrapped so that it refuses to send once the connection is gone or the
   * transaction has ended. All queries of one reservation share one executor, and so one wrapper.
   */
  #checked(handler: NonNullable<TrackedQuery['handler']>): NonNullable<TrackedQuery['handler']> {
    if (this.#executor?.raw === handler) return this.#executor.checked;
    const checked = Object.assign(
      (running: TrackedQuery) => {
        this.#checkOurs();
        if (this.#dead) return running.reject(connectionClosed());
        if (this.#released) {
          return running.reject(new StepkeyError('database_error', 'This transaction has ended; its handle can no longer run queries.'));
        }
        return handler(running);
      },
      { debug: handler.debug },
    );
    this.#executor = { raw: handler, checked };
    return checked;
  }

  #ensureOpen(): void {
    if (!this.#open) throw new StepkeyError('database_error', 'The transaction has already ended.');
  }

  /** The transaction's own BEGIN/COMMIT/ROLLBACK: allowed while it ends, tracked like any query. */
  #statement(text: string) {
    this.#checkOurs();
    if (this.#dead) throw connectionClosed();
    return this.#track(this.#connection.unsafe(text));
  }

  /**
   * The reserved connection as the transaction's body sees it: refusing
   * queries once the connection closed or the transaction ended (a handle
   * kept past its transaction must not write into the connection's next user).
   */
  #guarded(connection: postgres.ReservedSql): TxSql {
    const check = () => {
      this.#checkOurs();
      if (this.#dead) throw connectionClosed();
      if (!this.#open) {
        throw new StepkeyError('database_error', 'This transaction has ended; its handle can no longer run queries.');
      }
    };
    const guard =
      <A extends unknown[], R>(fn: (...args: A) => R) =>
      (...args: A): R => {
        check();
        return this.#track(fn(...args));
      };
    const sql = guard(connection as unknown as (...args: unknown[]) => unknown);
    return Object.assign(sql, {
      unsafe: guard(connection.unsafe),
      file: guard(connection.file),
      notify: guard(connection.notify),
      json: connection.json,
      array: connection.array,
      typed: connection.typed,
      types: connection.types,
      release: () => {
        throw new StepkeyError('database_error', 'A transaction’s connection is released by stepkey, not by its body.');
      },
      savepoint: this.#savepoint.bind(this),
    }) as unknown as TxSql;
  }

  async #savepoint<T>(nameOrBody: string | ((sql: TxSql) => T | Promise<T>), maybeBody?: (sql: TxSql) => T | Promise<T>) {
    const body = typeof nameOrBody === 'function' ? nameOrBody : maybeBody!;
    this.#savepoints += 1;
    const name = `stepkey_sp_${this.#savepoints}`;
    await this.sql.unsafe(`savepoint ${name}`);
    try {
      const result = await body(this.sql);
      await this.sql.unsafe(`release savepoint ${name}`);
      return result;
    } catch (error) {
      await this.sql.unsafe(`rollback to savepoint ${name}`);
      throw error;
    }
  }
}

/**
 * Runs `body` in a transaction and commits; rolls back if it throws. For
 * bodies that do not need to pipeline their last statement with COMMIT.
 */
export async function inTransaction<T>(pool: Sql, body: (sql: TxSql) => Promise<T>): Promise<T> {
  const transaction = await Transaction.begin(pool);
  let result: T;
  try {
    result = await body(transaction.sql);
  } catch (error) {
    await transaction.rollback();
    throw error;
  }
  await transaction.commit();
  return result;
}
