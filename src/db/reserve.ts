/**
 * Reserving a pooled connection for a transaction, bounded in time, and
 * asked for again while it waits.
 *
 * postgres.js's `reserve()` waits for a free connection without a limit, and
 * around a connection attempt that fails while it is set up (refused, a
 * server starting up, a backend ended) it can lose a waiting reservation:
 * handed over with a reconnect and dropped there (porsager/postgres#1195), or
 * left in line behind a reservation already refused, which is then handed
 * the next connection that opens — that connection stays out of the pool
 * until its lifetime ends (30–60 min), and the reservation behind it waits.
 * The promise of a lost reservation never settles, while connections sit
 * idle or come free.
 *
 * So a reservation that has waited is asked for again, after 250 ms and then
 * after twice as long each time (250, 500, 1,000 … until the bound): the new
 * request joins the pool's line and is served by the next connection that
 * comes free, or at once by an idle one. The first connection handed over is
 * used; any other is given straight back, as is one that arrives after the
 * bound (postgres.js cannot take a request back: at most 1 + log2(bound / 250)
 * requests per caller stay in line, each costing a hand-over when served).
 * A refusal of any request fails the reservation at once: a connection
 * attempt made for this caller failed, so Postgres is unavailable to it now.
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
