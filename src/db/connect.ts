/**
 * Connections. stepkey talks to Postgres through postgres.js; application code
 * inside steps and procedures gets drizzle on the same transaction.
 */
import postgres from 'postgres';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import { PostgresJsSession, PostgresJsTransaction } from 'drizzle-orm/postgres-js/session';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import { registerArrayTypes } from './array-types.js';
import type { TxSql } from './transaction.js';
import { socketsFor } from './socket.js';
import { newPoolHealth, trackPool } from './pool-health.js';
import { configuredLeaseMs } from './lease.js';
import { StepkeyError } from '../errors/stepkey-error.js';

export type Sql = postgres.Sql;
/** Anything that runs a query: the pool, a reserved connection or a transaction. */
export type Queryable = postgres.ISql;

/** The drizzle handle a step or a procedure gets for its transaction. */
export type DrizzleTx = PostgresJsTransaction<Record<string, never>, ExtractTablesWithRelations<Record<string, never>>>;

export interface Database {
  readonly url: string;
  /** The postgres.js pool. */
  readonly sql: Sql;
  /** drizzle on the same pool. */
  readonly db: PostgresJsDatabase;
  close(): Promise<void>;
}

export interface ConnectOptions {
  /** Pool size (default 10). */
  max?: number;
  applicationName?: string;
  /**
   * How long a session may sit idle inside a transaction before Postgres ends
   * it, releasing its locks (default: a run's lease, STEPKEY_LEASE_MS or 8 s;
   * 0 turns the bound off). Keep it at most the lease of the engines that use
   * the pool: a frozen process then holds others up no longer than a takeover
   * takes.
   */
  idleInTransactionTimeoutMs?: number;
  /** Called with the text of every statement the pool sends (begin and commit included): for counting, in benchmarks. */
  onStatement?: (text: string) => void;
}

/** Whether a URL asks for TLS (postgres.js reads `ssl` and `sslmode` from it). */
function asksForTls(url: string): boolean {
  const params = new URL(url).searchParams;
  const mode = params.get('sslmode') ?? params.get('ssl');
  return mode !== null && mode !== 'disable' && mode !== 'false';
}

/**
 * The startup's `options` parameter (server command-line options: whitespace
 * only, so none), sized so that a startup message is over 1 KB and postgres.js
 * sends it at once — which also flushes a write batch a close left stale (see
 * socket.ts) instead of leaving the slot mute.
 */
const STARTUP_PADDING = ' '.repeat(1024);

/** Seconds before a reconnect, after `attempts` failed ones across the pool: 50 ms doubling to 1 s, jittered. */
export function reconnectDelaySeconds(attempts: number): number {
  return Math.min(0.05 * 2 ** attempts, 1) * (0.5 + Math.random() / 2);
}

export function connect(url: string, options: ConnectOptions = {}): Database {
  const health = newPoolHealth();
  const idleInTransactionMs = options.idleInTransactionTimeoutMs ?? configuredLeaseMs();
  if (!Number.isInteger(idleInTransactionMs) || idleInTransactionMs < 0) {
    throw new StepkeyError(
      'invalid_options',
      `idleInTransactionTimeoutMs must be a whole number of milliseconds ≥ 0 (0: no bound), got ${String(options.idleInTransactionTimeoutMs)}.`,
    );
  }
  const sql = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    idle_timeout: 30,
    connect_timeout: 10,
    // postgres.js waits before each reconnect by a count of failed attempts shared by the whole pool,
    // which an outage drives up (every queued query tries a connection), to up to 20 s: a pool came
    // back that long after its Postgres did. Once Postgres answers, a connection is back within a second.
    backoff: reconnectDelaySeconds,
    connection: {
      application_name: options.applicationName ?? 'stepkey',
      idle_in_transaction_session_timeout: idleInTransactionMs,
      options: STARTUP_PADDING,
    },
    // postgres.js would fetch the array types on every new connection, from a promise nobody
    // handles (a backend terminated during that fetch killed the process): see array-types.ts.
    // TLS connections keep the fetch: socket.ts cannot see their startup (see there).
    fetch_types: asksForTls(url),
    // Not in postgres.js's types, but supported: see socket.ts for why.
    ...({ socket: socketsFor(health) } as object),
    ...(options.onStatement ? { debug: (_connection: number, text: string) => options.onStatement!(text) } : {}),
  });
  registerArrayTypes(sql);
  trackPool(sql, health);
  // drizzle configures the pool's timestamp parsers once, here.
  const db = drizzle({ client: sql });
  return {
    url,
    sql,
    db,
    close: () => sql.end({ timeout: 5 }),
  };
}

const dialect = new PgDialect();

/** drizzle bound to an open postgres.js transaction: writes join that transaction. */
export function drizzleOn(tx: TxSql): DrizzleTx {
  // The same construction drizzle uses for its own transactions.
  const session = new PostgresJsSession(tx as unknown as Sql, dialect, undefined, {});
  return new PostgresJsTransaction(dialect, session as never, undefined) as unknown as DrizzleTx;
}
