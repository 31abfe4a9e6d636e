/**
 * How the CLI ends. Every command returns an exit code from this table, and
 * every error becomes one line on stderr (a JSON object with --json); the
 * stack only with STEPKEY_DEBUG=1.
 *
 *   0  success (check: the manifest holds)
 *   1  the operation failed: not found, nothing to cancel, a run that did not
 *      complete on resume, check problems or orphaned runs, database errors
 *   2  usage error: unknown command or flag, missing or malformed argument,
 *      no database URL, no app module where one is needed
 */
import { errorCode, translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';

export const ExitCode = { ok: 0, failed: 1, usage: 2 } as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** The command line cannot be run as written: exit 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
  /** The command whose --help to point at, if any. */
  readonly command: string | undefined;

  constructor(message: string, command?: string) {
    super(message);
    this.command = command;
  }
}

/** The operation ran and failed in an expected way (a key not found, a run already ended): exit 1. */
export class CliFailure extends Error {
  override readonly name = 'CliFailure';
  readonly code: string;

  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

export interface ErrorReport {
  exitCode: ExitCode;
  code: string;
  message: string;
}

/** Classifies an error thrown by a command: its exit code, a code and one line of message. */
export function describeError(error: unknown, action: string): ErrorReport {
  if (error instanceof UsageError) {
    const hint = error.command ? ` (see: stepkey ${error.command} --help)` : ' (see: stepkey --help)';
    return { exitCode: ExitCode.usage, code: 'usage', message: error.message + hint };
  }
  if (error instanceof CliFailure) return { exitCode: ExitCode.failed, code: error.code, message: error.message };
  if (error instanceof StepkeyError) return { exitCode: ExitCode.failed, code: error.code, message: error.message };
  if (errorCode(error) !== undefined) {
    const translated = translateDatabaseError(error, action);
    return { exitCode: ExitCode.failed, code: translated.code, message: translated.message };
  }
  const message = error instanceof Error ? error.message : String(error);
  return { exitCode: ExitCode.failed, code: 'error', message };
}

/** The stack of an error and its causes, for STEPKEY_DEBUG=1. */
export function debugText(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current; depth += 1) {
    parts.push(current instanceof Error ? (current.stack ?? current.message) : String(current));
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join('\ncaused by: ');
}
