/**
 * Building a read statement's text with numbered parameters: filters add
 * conditions only when given, so each statement names exactly what the
 * planner may use an index for. Values always travel as parameters; only
 * stepkey's own fixed SQL is spliced into the text.
 */
import type { Clock } from '../../db/clock.js';

export class SqlText {
  readonly values: unknown[] = [];
  readonly #clock: Clock;
  #now: string | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** A placeholder for `value`. */
  param(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }

  /** stepkey's now() — the database's clock plus the test offset — as one parameter per statement. */
  now(): string {
    this.#now ??= `(now() + ${this.param(this.#clock.offsetMs)}::float8 * interval '1 millisecond')`;
    return this.#now;
  }
}
