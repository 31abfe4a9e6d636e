/**
 * What an idempotent HTTP handler returns, `{ status, headers, body }`, and
 * how it is stored and replayed. No capture of `res.write`, no streams: the
 * answer is a value, and a replay is that value's stored form, byte for byte.
 *
 *   body       a string or bytes are sent as they are; any other value as JSON
 *              (Content-Type application/json unless the handler set one);
 *              undefined sends no body
 *   stored     the status, the body's bytes and the headers in STORED_HEADERS
 *              (the representation's own: its type, language, location,
 *              validators, links); every other header the handler sets
 *              (Set-Cookie, a request id, caching advice) goes with the first
 *              answer only
 *   dropped    Content-Length, Transfer-Encoding and Connection (the server's
 *              to set) and Idempotent-Replayed (stepkey's, on replays only)
 *
 * The stored form is JSON text in the ledger's outcome column (the status is
 * its code): `{"headers":{…},"body":"…"}`, or `"base64"` for bytes that are
 * not UTF-8.
 */
import { toJsonText } from '../ledger/outcome.js';

export interface HandlerAnswer {
  /** 200–599. 2xx/3xx: stored with the handler's writes; 4xx: stored alone (see the store policy); else nothing is stored. */
  status: number;
  headers?: Record<string, string>;
  /** A string or bytes, sent as they are; any other value, as JSON. */
  body?: unknown;
}

/** The headers stored with an answer and replayed with it (lower case). */
export const STORED_HEADERS: readonly string[] = Object.freeze([
  'content-type',
  'content-language',
  'content-disposition',
  'content-location',
  'location',
  'etag',
  'last-modified',
  'link',
]);

const dropped = new Set(['content-length', 'transfer-encoding', 'connection', 'idempotent-replayed']);
const tokenPattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** An answer as it goes on the wire: header names in lower case, the body as bytes. */
export interface WireAnswer {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

/**
 * The handler's answer, checked, as it is sent. A wrong answer is the
 * server's bug, never stored: a TypeError naming the route (logged with the
 * 500's error id).
 */
export function toWire(answer: HandlerAnswer, route: string): WireAnswer {
  const wrong = (problem: string, cause?: unknown): never => {
    throw new TypeError(`The answer of ${route} is not an HTTP answer: ${problem}. Return { status, headers?, body? }.`, { cause });
  };
  if (typeof answer !== 'object' || answer === null) return wrong(`got ${answer === null ? 'null' : typeof answer}`);
  const { status } = answer;
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 200 || status > 599) {
    return wrong(`its status must be a whole number from 200 to 599, got ${String(status)}`);
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(answer.headers ?? {})) {
    if (!tokenPattern.test(name)) wrong(`${JSON.stringify(name)} is not a header name`);
    if (typeof value !== 'string' || /[\r\n\0]/.test(value)) wrong(`the value of header ${name} must be a string without line breaks`);
    const lower = name.toLowerCase();
    if (!dropped.has(lower)) headers[lower] = value;
  }
  const { body } = answer;
  let bytes: Uint8Array;
  if (body === undefined) bytes = new Uint8Array(0);
  else if (typeof body === 'string') {
    bytes = Buffer.from(body, 'utf8');
    headers['content-type'] ??= 'text/plain; charset=utf-8';
  } else if (body instanceof Uint8Array) {
    bytes = body;
    headers['content-type'] ??= 'application/octet-stream';
  } else {
    let text = '';
    try {
      text = toJsonText(body, 'body');
    } catch (error) {
      wrong((error as Error).message, error);
    }
    bytes = Buffer.from(text, 'utf8');
    headers['content-type'] ??= 'application/json';
  }
  return { status, headers, body: bytes };
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The stored form of an answer: its stored headers and its body. */
export function encodeStored(answer: WireAnswer): string {
  const headers: Record<string, string> = {};
  for (const name of STORED_HEADERS) if (answer.headers[name] !== undefined) headers[name] = answer.headers[name]!;
  let text: string | undefined;
  try {
    text = strictUtf8.decode(answer.body);
  } catch {
    text = undefined;
  }
  return JSON.stringify(text === undefined ? { headers, base64: Buffer.from(answer.body).toString('base64') } : { headers, body: text });
}

/** A stored answer as it is replayed: the stored status, headers and body, marked Idempotent-Replayed. */
export function decodeStored(stored: string, status: number | null): WireAnswer {
  const parsed = JSON.parse(stored) as { headers?: Record<string, string>; body?: string; base64?: string };
  const body = parsed.base64 !== undefined ? Buffer.from(parsed.base64, 'base64') : Buffer.from(parsed.body ?? '', 'utf8');
  return { status: status ?? 200, headers: { ...parsed.headers }, body };
}

/** The same answer, marked as a replay of the stored outcome. */
export function replayed(answer: WireAnswer): WireAnswer {
  return { ...answer, headers: { ...answer.headers, 'idempotent-replayed': 'true' } };
}
