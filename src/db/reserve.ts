/**
 * Reserving a pooled connection for a transaction, bounded in time and
 * proof against reservations that postgres.js 3.4 loses.
 *
 * postgres.js's `reserve()` waits for a free connection without a limit, and
 * around a connection that fails while it is being set up (a refused
 * connection, a server starting up, a backend ended) it can lose a waiting
 * reservation: handed over with that connection's reconnect and dropped there
 * (porsager/postgres#1195), or queued behind a reservation already refused,
 * which takes the next connection freed in its place. The promise of a lost
 * reservation never settles, while connections sit idle or come free.
 *
 * So a reservation that has waited is asked for again, after 250 ms and then
 * after twice as long each time (250, 500, 1,000 … until the bound): a
 * request joins the back of the pool's queue and is served by the next
 * connection that comes free, or at once by an idle one. The first
 * connection handed over is used; any other is given straight back, as is a
 * connection that arrives after the bound. A refusal of any request fails the
 * reservation at once (Postgres is down: a caller must not wait the bound).
 */
import type postgres from 'postgres';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Sql } from './connect.js';

/** How long a transaction waits for a pooled connection unless told otherwise. */
export const DEFAULT_ACQUIRE_TIMEOUT_MS = 10_000;

/** The wait before a reservation is asked for again the first time; each later wait is twice the one before. */
const FIRST_REQUEST_AGAIN_MS = 250;

/** A connection of `pool`, reserved within `ms`: past it, `database_unavailable`. */
export function reserveWithin(pool: Sql, ms: number): Promise<postgres.ReservedSql> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let again: NodeJS.Timeout | undefined;
    const finish = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(expiry);
      clearTimeout(again);
      return true;
    };
    const request = () => {
      pool.reserve().then(
        (connection) => (finish() ? resolve(connection) : connection.release()),
        (error: unknown) => {
          if (finish()) reject(error);
        },
      );
    };
    const expiry = setTimeout(() => {
      if (finish()) reject(new StepkeyError('database_unavailable', `No database connection could be had within ${ms} ms.`));
    }, ms);
    const requestAgain = (waitMs: number) => {
      again = setTimeout(() => {
        request();
        requestAgain(waitMs * 2);
      }, waitMs);
    };
    request();
    requestAgain(FIRST_REQUEST_AGAIN_MS);
  });
}
