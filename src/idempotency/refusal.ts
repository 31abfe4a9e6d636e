/**
 * A keyed call's refusals: what stepkey answers instead of the work's own
 * answer — a key that is missing or malformed, an anonymous caller, a key in
 * progress or used for something else, a failure around the work — as an
 * HTTP status, a message and the headers that go with it (Retry-After).
 * Protocol-neutral: the tRPC option throws one as a TRPCError, stepkey/http
 * writes it as an application/problem+json answer. The message is always
 * one a caller may read: internal failures carry an error id, not their text
 * (internal-failure.ts).
 */
import { instrument } from '../telemetry/instrumentation.js';
import { IDEMPOTENCY_KEY_HEADER } from './header.js';

export class Refusal extends Error {
  override readonly name = 'Refusal';
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;

  constructor(status: number, message: string, options: { headers?: Record<string, string>; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
    this.headers = options.headers ?? {};
  }
}

export function isRefusal(error: unknown): error is Refusal {
  return error instanceof Refusal;
}

/** Seconds for Retry-After: at least 1. */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}

/** 409 with Retry-After: another attempt with this key is still working. */
export function inProgress(retryAfterMs: number): Refusal {
  instrument.answered(409);
  const seconds = retryAfterSeconds(retryAfterMs);
  return new Refusal(409, `A request with this ${IDEMPOTENCY_KEY_HEADER} is still in progress; retry after ${seconds} s.`, {
    headers: { 'Retry-After': seconds },
  });
}

/** What a key was first used for, as the ledger row records it. */
export interface KeyUse {
  kind: string;
  name: string | null;
}

/** What a request row is called where the caller can see it: a tRPC procedure, an HTTP route. */
export type RequestNoun = 'procedure' | 'route';

/**
 * 422: the key already names another operation. The answer says which: a
 * procedure (route) or workflow of another name, or the same one with other
 * input (for a workflow, the same workflow reached through another
 * procedure or route looks the same).
 */
export function mismatch(existing: KeyUse, current: { kind: 'request' | 'run'; name: string }, noun: RequestNoun): Refusal {
  const what = (use: KeyUse) => `${use.kind === 'run' ? 'workflow' : noun} ${use.name ?? '(unnamed)'}`;
  const other = existing.kind !== current.kind || existing.name !== current.name;
  instrument.answered(422);
  const message = other
    ? `This ${IDEMPOTENCY_KEY_HEADER} was already used for another operation, ${what(existing)}; a key names one operation: use a new key for ${current.name}.`
    : `This ${IDEMPOTENCY_KEY_HEADER} was already used for ${what(current)} with different input${current.kind === 'run' ? ` (or through another ${noun})` : ''}; a key names one request: use a new key for a changed request.`;
  return new Refusal(422, message);
}

/** 412: the run under this key was cancelled by an operator (stored, final). */
export function cancelled(reason: string | undefined): Refusal {
  return new Refusal(412, `The operation for this key was cancelled: ${reason ?? 'cancelled'}`);
}
