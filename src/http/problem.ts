/**
 * stepkey's own answers over HTTP — refusals (400, 401, 405, 409, 412, 413,
 * 415, 422, 500, 503) and stored errors — as RFC 9457 problem details:
 * `application/problem+json`, `{ "title", "status", "detail", "code"? }`,
 * with the refusal's headers (Retry-After). The detail is always one a
 * caller may read (internal failures name an error id).
 */
import { STATUS_CODES } from 'node:http';
import type { Refusal } from '../idempotency/refusal.js';
import { storedErrorStatus } from '../idempotency/store-policy.js';
import type { StoredError } from '../ledger/outcome.js';
import type { WireAnswer } from './answer.js';

export function problem(status: number, detail: string, options: { headers?: Readonly<Record<string, string>>; code?: string } = {}): WireAnswer {
  const headers: Record<string, string> = { 'content-type': 'application/problem+json' };
  for (const [name, value] of Object.entries(options.headers ?? {})) headers[name.toLowerCase()] = value;
  const body = { title: STATUS_CODES[status] ?? 'Error', status, detail, ...(options.code === undefined ? {} : { code: options.code }) };
  return { status, headers, body: Buffer.from(JSON.stringify(body), 'utf8') };
}

export function refusalAnswer(refusal: Refusal): WireAnswer {
  return problem(refusal.status, refusal.message, { headers: refusal.headers });
}

/** A stored deterministic error (a non-retryable error, an errored run): its code's status, its message and code. */
export function storedErrorAnswer(stored: StoredError): WireAnswer {
  return problem(storedErrorStatus(stored), stored.message, typeof stored.code === 'string' ? { code: stored.code } : {});
}
