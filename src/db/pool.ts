/**
 * A postgres.js pool with stepkey's settings: sockets that survive a restart
 * of Postgres (socket.ts), a bounded idle time inside transactions, reconnects
 * that back off briefly, no NOTICE printing, and the row types drizzle reads.
 * connect() (connect.ts) adds drizzle on top; code that sends SQL only — the
 * CLI's reads — opens the pool alone and never loads drizzle.
 */
import postgres from 'postgres';
import { registerArrayTypes } from './array-types.js';
import { socketsFor } from './socket.js';
import { newPoolHealth, trackPool } from './pool-health.js';
import { configuredLeaseMs } from './lease.js';
import { StepkeyError } from '../errors/stepkey-error.js';

export type Sql = postgres.Sql;

export interface Pool {
  readonly url: string;
  /** The postgres.js pool. */
  readonly sql: Sql;
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

export function openPool(url: string, options: ConnectOptions = {}): Pool {
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
  drizzleTypes(sql);
  return { url, sql, close: () => sql.end({ timeout: 5 }) };
}

/**
 * The type parsers drizzle sets on a pool it is given (drizzle-orm/postgres-js
 * driver.js): dates, times and intervals arrive as the server's text, JSON is
 * sent as it is. Set here too, so that a pool reads the same rows with drizzle
 * or without (connect() adds drizzle; the CLI's reads do without it).
 */
function drizzleTypes(sql: Sql): void {
  const asIs = (value: unknown) => value;
  for (const type of [1184, 1082, 1083, 1114, 1182, 1185, 1115, 1231]) {
    sql.options.parsers[type] = asIs;
    sql.options.serializers[type] = asIs;
  }
  sql.options.serializers[114] = asIs;
  sql.options.serializers[3802] = asIs;
}

