/**
 * Connections. stepkey talks to Postgres through postgres.js; application code
 * inside steps and procedures gets drizzle on the same transaction.
 */
import postgres from 'postgres';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import { PostgresJsSession, PostgresJsTransaction } from 'drizzle-orm/postgres-js/session';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import type { TxSql } from './transaction.js';
import { openPool, type ConnectOptions, type Sql } from './pool.js';

export { reconnectDelaySeconds, type ConnectOptions, type Sql } from './pool.js';

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

export function connect(url: string, options: ConnectOptions = {}): Database {
  const pool = openPool(url, options);
  return { ...pool, db: drizzle({ client: pool.sql }) };
}

const dialect = new PgDialect();

/** drizzle bound to an open postgres.js transaction: writes join that transaction. */
export function drizzleOn(tx: TxSql): DrizzleTx {
  // The same construction drizzle uses for its own transactions.
  const session = new PostgresJsSession(tx as unknown as Sql, dialect, undefined, {});
  return new PostgresJsTransaction(dialect, session as never, undefined) as unknown as DrizzleTx;
}
