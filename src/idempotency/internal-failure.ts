/**
 * The answer to an internal failure: a 500 with a fixed message and an error
 * id — never the step's message, the driver's text, the SQL or its
 * parameters, which may carry the caller's personal data. The full error is
 * logged once, with the id, through stepkey's logger (event
 * `trpc.internal_error` or `http.internal_error`); for a failed run the id is
 * derived from its stored error (errors/error-id.ts), so `stepkey inspect`
 * shows the same id beside it.
 *
 * Deliberate answers are not internal failures and keep their status and
 * message: an error the app raises on purpose, a stored deterministic error,
 * and stepkey's own 4xx/503 answers.
 */
import { failedRunErrorId, newErrorId } from '../errors/error-id.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { serializeError, type StoredError } from '../ledger/outcome.js';
import { resolveLogger, type Logger } from '../log/logger.js';
import { Refusal } from './refusal.js';

/** Where an internal failure happened, for its log line. */
export interface ErrorReport {
  log: Logger;
  /** What carried the call: names the log line's event. */
  via: 'trpc' | 'http';
  /** The procedure's path or the route's name. */
  path?: string;
  scope?: string;
  key?: string;
}

/** The report of a call: its logger (config.logger, pino by default), path and key. */
export function errorReport(
  config: { logger?: Logger | false },
  via: ErrorReport['via'],
  path: string | undefined,
  ref?: { scope: string; key: string },
): ErrorReport {
  return { log: resolveLogger(config.logger), via, ...(path === undefined ? {} : { path }), ...(ref ? { scope: ref.scope, key: ref.key } : {}) };
}

const fixedMessages = {
  run: 'stepkey: the run failed',
  database: 'stepkey: the database failed while handling this request',
  request: 'stepkey: the request failed',
} as const;

/** A failed run's stored error, when the error is stepkey's run_failed. */
function storedRunError(error: unknown): StoredError | undefined {
  if (!(error instanceof StepkeyError) || error.code !== 'run_failed') return undefined;
  const stored = error.details.error;
  return stored && typeof stored === 'object' ? (stored as StoredError) : undefined;
}

/** The 500 for an internal failure; logs the full error with the id the caller is given. */
export function internalFailure(error: unknown, report: ErrorReport): Refusal {
  const stored = storedRunError(error);
  const kind = stored ? 'run' : error instanceof StepkeyError && error.code === 'database_error' ? 'database' : 'request';
  const errorId = stored && report.scope !== undefined && report.key !== undefined ? failedRunErrorId(report.scope, report.key, stored) : newErrorId();
  const message = `${fixedMessages[kind]} (error id ${errorId})`;
  report.log.error(
    {
      event: `${report.via}.internal_error`,
      errorId,
      ...(report.path === undefined ? {} : { path: report.path }),
      ...(report.scope === undefined ? {} : { scope: report.scope }),
      ...(report.key === undefined ? {} : { key: report.key }),
      error: stored ?? serializeError(error),
    },
    message,
  );
  return new Refusal(500, message, { cause: error });
}
