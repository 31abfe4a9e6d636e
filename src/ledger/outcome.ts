/**
 * Outcomes as they are stored: text, written once and replayed byte for byte
 * (never jsonb, which reorders keys). Values must be JSON: a value JSON would
 * silently change (NaN → null, a Map → {}) is refused with a clear error
 * instead of being stored wrong.
 */
import { StepkeyError } from '../errors/stepkey-error.js';

function formatPath(path: readonly (string | number)[]): string {
  let text = '$';
  for (const part of path) text += typeof part === 'number' ? `[${part}]` : `.${part}`;
  return text;
}

/**
 * Checks that JSON.stringify will represent `value` faithfully, then returns
 * its text. Dates are allowed (stored as ISO strings; step schemas turn them
 * back into Dates); object properties that are undefined are dropped, as JSON
 * drops them.
 */
export function toJsonText(value: unknown, what = 'outcome'): string {
  return jsonTextOf(value, `The ${what}`);
}

/** toJsonText, its error naming the value by `subject` as given (a sentence's start: "The output of step 'x'"). */
export function jsonTextOf(value: unknown, subject: string): string {
  const path: (string | number)[] = [];
  const seen = new Set<object>();
  const fail = (problem: string): never => {
    throw new StepkeyError('not_serializable', `${subject} is not JSON-serialisable: ${problem} at ${formatPath(path)}.`, {
      details: { path: formatPath(path) },
    });
  };
  const check = (current: unknown): void => {
    switch (typeof current) {
      case 'string':
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(current)) fail(`${current} is not a JSON number`);
        return;
      case 'undefined':
        fail('undefined');
        return;
      case 'object':
        break;
      default:
        fail(`a ${typeof current}`);
    }
    if (current === null) return;
    if (current instanceof Date) {
      if (Number.isNaN(current.getTime())) fail('an invalid Date');
      return;
    }
    if (seen.has(current as object)) fail('a circular reference');
    seen.add(current as object);
    if (Array.isArray(current)) {
      current.forEach((item, index) => {
        path.push(index);
        check(item);
        path.pop();
      });
    } else {
      const proto = Object.getPrototypeOf(current);
      if (proto !== Object.prototype && proto !== null) {
        fail(`a ${(current as { constructor?: { name?: string } }).constructor?.name ?? 'non-plain object'}`);
      }
      for (const [key, item] of Object.entries(current as Record<string, unknown>)) {
        if (item === undefined) continue;
        path.push(key);
        check(item);
        path.pop();
      }
    }
    seen.delete(current as object);
  };
  check(value);
  return JSON.stringify(value);
}

/** What Postgres said about an error it raised (postgres.js's PostgresError fields). */
export interface DatabaseErrorDetails {
  /** The SQLSTATE, e.g. 42P01 (undefined table). */
  sqlState: string;
  severity?: string;
  schema?: string;
  table?: string;
  column?: string;
  constraint?: string;
  detail?: string;
  hint?: string;
}

/** An error as stored in the ledger and replayed to later callers. */
export interface StoredError {
  name: string;
  message: string;
  code?: string | number;
  data?: unknown;
  /** When Postgres raised it: its SQLSTATE and what it names. */
  db?: DatabaseErrorDetails;
  /** The error it was caused by (`error.cause`), stored the same way. */
  cause?: StoredError;
}

/** How deep a cause chain is kept. */
const MAX_CAUSES = 5;

/**
 * An error as stored: name, message, code, data — and, so that an operator
 * can tell what happened, the database's details (SQLSTATE, table,
 * constraint…) and the cause chain. Callers replaying a stored error get back
 * name, message, code and data only.
 */
/** Where an error rebuilt from a stored one keeps what was stored, cause chain included. */
export const storedForm = Symbol('stepkey.storedError');

export function serializeError(error: unknown, depth = 0): StoredError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error) };
  const kept = (error as { [storedForm]?: StoredError })[storedForm];
  if (kept) return kept;
  const stored: StoredError = { name: error.name, message: error.message };
  const { code, data } = error as { code?: unknown; data?: unknown };
  if (typeof code === 'string' || typeof code === 'number') stored.code = code;
  if (data !== undefined) {
    try {
      toJsonText(data, 'error data');
      stored.data = data;
    } catch {
      // Data that cannot be stored is left out rather than failing the store.
    }
  }
  const db = databaseDetails(error);
  if (db) stored.db = db;
  if (error.cause !== undefined && error.cause !== null && depth < MAX_CAUSES) stored.cause = serializeError(error.cause, depth + 1);
  return stored;
}

/** The SQLSTATE an error or one of its causes carries, as stored. */
export function storedSqlState(error: StoredError | undefined): string | undefined {
  for (let current = error; current; current = current.cause) if (current.db) return current.db.sqlState;
  return undefined;
}

/** postgres.js's PostgresError: a five-character SQLSTATE in `code` and the server's fields beside it. */
function databaseDetails(error: Error): DatabaseErrorDetails | undefined {
  const fields = error as Error & Record<string, unknown>;
  if (error.name !== 'PostgresError' || typeof fields.code !== 'string' || !/^[0-9A-Z]{5}$/.test(fields.code)) return undefined;
  const details: DatabaseErrorDetails = { sqlState: fields.code };
  const copy = (from: string, to: Exclude<keyof DatabaseErrorDetails, 'sqlState'>) => {
    const value = fields[from];
    if (typeof value === 'string' && value !== '') details[to] = value;
  };
  copy('severity', 'severity');
  copy('schema_name', 'schema');
  copy('table_name', 'table');
  copy('column_name', 'column');
  copy('constraint_name', 'constraint');
  copy('detail', 'detail');
  copy('hint', 'hint');
  return details;
}

/**
 * An error that retrying cannot fix: it is stored as the outcome and replayed
 * to every later caller. Any error with `retryable === false` counts too.
 */
export class NonRetryableError extends Error {
  override name = 'NonRetryableError';
  readonly retryable = false;
  readonly code: string | undefined;
  readonly data: unknown;

  constructor(message: string, options: { code?: string; data?: unknown; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code;
    this.data = options.data;
  }
}

export function isNonRetryable(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { retryable?: unknown }).retryable === false;
}
