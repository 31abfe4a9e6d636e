/**
 * The clock that stepkey's SQL reads. Leases, expiry and retention use the
 * database's `now()`, never the application's clock, so that several machines
 * agree. Tests move time by setting an offset that every statement adds to
 * `now()`; in production the offset stays 0.
 */
import type postgres from 'postgres';

export class Clock {
  #offsetMs = 0;

  get offsetMs(): number {
    return this.#offsetMs;
  }

  /** Moves this clock forward (or back, with a negative value). */
  advance(ms: number): void {
    if (!Number.isFinite(ms)) throw new RangeError(`Clock.advance needs a finite number of ms, got ${ms}.`);
    this.#offsetMs += ms;
  }

  reset(): void {
    this.#offsetMs = 0;
  }
}

/** The shared clock used when none is given: offset 0 unless a test moves it. */
export const systemClock = new Clock();

/**
 * `now()` as stepkey sees it, as a postgres.js fragment: plain `now()` at
 * offset 0 (production), so that a statement carries no parameter and no
 * arithmetic per use of the time.
 */
export function sqlNow(sql: postgres.ISql, clock: Clock) {
  const offset = clock.offsetMs;
  return offset === 0 ? sql`now()` : sql`(now() + ${offset}::float8 * interval '1 millisecond')`;
}

/**
 * The time of the statement (not of its transaction's start, as sqlNow) as
 * stepkey sees it, read once per statement: for a statement sent late in a
 * long transaction — a dispatch riding a completion after a tx step — that
 * must see what was enqueued while the transaction was open.
 */
export function sqlStatementNow(sql: postgres.ISql, clock: Clock) {
  const offset = clock.offsetMs;
  return offset === 0
    ? sql`(select clock_timestamp())`
    : sql`(select clock_timestamp() + ${offset}::float8 * interval '1 millisecond')`;
}
