/**
 * stepkey's logs: structured JSON lines with a level, through pino — or any
 * logger with pino's methods (`info(object, message)` …) that the app passes
 * as `logger`. stepkey writes no logger of its own: without one given, it
 * loads pino (an optional peer) the first time it logs, at the level in
 * STEPKEY_LOG_LEVEL (default info), writing to stdout; without pino
 * installed, it logs nothing (background failures still reach onError).
 *
 * Errors are logged under `error` as stepkey stores them (serializeError):
 * name, message, code, the database's details and the cause chain (not
 * under `err`, whose pino serializer folds the causes into the message).
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

type LogMethod = (object: Record<string, unknown>, message?: string) => void;

/** The part of pino's API stepkey logs through (a pino instance is one). */
export interface Logger {
  debug: LogMethod;
  info: LogMethod;
  warn: LogMethod;
  error: LogMethod;
}

const noop: LogMethod = () => {};

/** A logger that drops everything. */
export const silentLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });

let shared: Logger | undefined;

/**
 * pino, loaded the first time something is logged (so that importing stepkey
 * loads no optional peer). Lines logged before it has loaded are kept and
 * written once it has, in order; without pino they are dropped.
 */
export function defaultLogger(): Logger {
  if (shared) return shared;
  let target: Logger | undefined;
  let loading: Promise<void> | undefined;
  const waiting: [LogLevel, Record<string, unknown>, string | undefined][] = [];
  const load = () => {
    loading ??= import('pino').then(
      (module) => {
        const pino = (module as unknown as { default: (options: object) => Logger }).default;
        target = pino({ name: 'stepkey', level: process.env.STEPKEY_LOG_LEVEL || 'info' });
      },
      () => {
        target = silentLogger;
      },
    ).then(() => {
      for (const [level, object, message] of waiting.splice(0)) target![level](object, message);
    });
  };
  const method =
    (level: LogLevel): LogMethod =>
    (object, message) => {
      if (target) return target[level](object, message);
      if (process.env.STEPKEY_LOG_LEVEL === 'silent') return;
      if (waiting.length < 1_000) waiting.push([level, object, message]);
      load();
    };
  shared = { debug: method('debug'), info: method('info'), warn: method('warn'), error: method('error') };
  return shared;
}

/** The logger an option asks for: the app's own, none (false), or the default. */
export function resolveLogger(option: Logger | false | undefined): Logger {
  if (option === false) return silentLogger;
  return option ?? defaultLogger();
}
