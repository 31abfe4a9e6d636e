/**
 * A statement built as one text with numbered parameters, sent as one
 * prepared postgres.js query.
 *
 * A postgres.js fragment (sql`…` nested in another sql`…`) is a query object
 * of its own — a promise with its handlers — that postgres.js walks again
 * when it sends the statement; a statement of a few optional parts costs a
 * few of them each time it is built. The statements the engine sends with
 * every step are built here instead: the text is appended to, `${value}`
 * becomes the next `$n`, and `query()` makes the single query. Postgres sees
 * the same text for the same shape, so the statement stays prepared.
 */
import type postgres from 'postgres';
import type { Clock } from './clock.js';
import type { Queryable } from './connect.js';

/** Text spliced in as it is by `StatementText.sql` (never a parameter). */
export class SqlText {
  constructor(readonly text: string) {}
}

export class StatementText {
  #text = '';
  readonly #params: unknown[] = [];

  get text(): string {
    return this.#text;
  }

  get params(): readonly unknown[] {
    return this.#params;
  }

  /** Appends SQL: each interpolated value is the next parameter, except SqlText, which is spliced in. */
  sql(strings: TemplateStringsArray, ...values: unknown[]): this {
    let text = strings[0]!;
    for (let i = 0; i < values.length; i += 1) {
      const value = values[i];
      text += (value instanceof SqlText ? value.text : this.param(value)) + strings[i + 1]!;
    }
    this.#text += text;
    return this;
  }

  /** Adds a parameter and returns its placeholder ($n). */
  param(value: unknown): string {
    this.#params.push(value);
    return `$${this.#params.length}`;
  }

  /**
   * `now()` as stepkey sees it (see clock.ts): plain `now()` at offset 0, so
   * that the text, and the prepared statement, stay the same in production.
   */
  now(clock: Clock): SqlText {
    const offset = clock.offsetMs;
    return new SqlText(offset === 0 ? 'now()' : `(now() + ${this.param(offset)}::float8 * interval '1 millisecond')`);
  }

  /**
   * The statement, unexecuted (postgres.js queries are lazy), prepared like a tagged one — even
   * with no parameters, where postgres.js would otherwise send it as a simple query. The builder
   * is finished then: its parameters are read when the query is sent.
   */
  query<T extends object[] = postgres.Row[]>(q: Queryable): postgres.PendingQuery<T> {
    const options = { prepare: true, simple: false } as postgres.UnsafeQueryOptions;
    return q.unsafe<T>(this.#text, this.#params as postgres.ParameterOrJSON<never>[], options);
  }
}
