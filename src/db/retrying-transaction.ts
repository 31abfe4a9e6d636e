/**
 * A transaction of its own for a transition that locks rows in an order
 * another transaction may meet from the other end — a run's tree ended root
 * down (lifecycle/tree.ts) while a child ends itself, locking itself and then
 * its parent. Postgres breaks such a cycle by aborting one side (a deadlock,
 * or a serialization failure); the aborted side is run again here, from the
 * start, in a fresh transaction: up to `attempts` in all (default 3).
 *
 * The lifecycle's transitions never commit on their own: the callers that
 * need one alone (the sweeper, a run's own process, an operator's cancel)
 * open it here, in the database layer beside the transaction it retries.
 */
import type { Sql } from './connect.js';
import { inTransaction, type TxSql } from './transaction.js';
import { isTransientConflict } from '../errors/pg-errors.js';

export async function inTransactionRetryingDeadlock<T>(sql: Sql, work: (tx: TxSql) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await inTransaction(sql, work);
    } catch (error) {
      if (!isTransientConflict(error) || attempt >= attempts) throw error;
    }
  }
}
