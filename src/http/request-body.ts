/**
 * A request's body as stepkey/http reads it, and what its fingerprint
 * covers:
 *
 *   JSON (application/json, …+json)   the canonical JSON of the value: object
 *                                      keys in any order fingerprint the same,
 *                                      array order counts; declared volatile
 *                                      fields are left out
 *   multipart/form-data               its parts (multipart.ts), not the
 *                                      boundary, which changes between retries
 *   anything else                     the sha256 of its bytes and its content
 *                                      type (parameters in any order and case)
 *   no body                           nothing but the method
 *
 * The method is always covered, and the route (the fingerprint's purpose).
 * A JSON body that does not parse is a 400, before anything is claimed.
 */
import { hash } from 'node:crypto';
import { Refusal } from '../idempotency/refusal.js';
import { multipartDigests } from './multipart.js';

export interface RequestBody {
  /** The body's bytes as received (where a body parser ran before stepkey: the JSON of the value it parsed). */
  readonly bytes: Uint8Array;
  /** The Content-Type header, or null. */
  readonly contentType: string | null;
  /** The parsed value of a JSON body; undefined for any other body, or none. */
  readonly json: unknown;
  /** The bytes as UTF-8 text. */
  text(): string;
}

/** Whether a Content-Type names JSON: application/json, or any type with a +json suffix. */
export function isJsonType(contentType: string | null): boolean {
  const media = mediaType(contentType);
  return media === 'application/json' || media.endsWith('+json');
}

function mediaType(contentType: string | null): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

function makeBody(bytes: Uint8Array, contentType: string | null, json: unknown): RequestBody {
  return { bytes, contentType, json, text: () => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8') };
}

/** A body read from the wire. */
export function bodyFromBytes(bytes: Uint8Array, contentType: string | null): RequestBody {
  if (bytes.length === 0 || !isJsonType(contentType)) return makeBody(bytes, contentType, undefined);
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Refusal(400, `The request body is not valid JSON (its Content-Type says it is): ${(error as Error).message}.`);
  }
  return makeBody(bytes, contentType, json);
}

/** A JSON body a body parser (express.json()) already read: fingerprinted by the canonical JSON of its value. */
export function bodyFromParsed(value: unknown, contentType: string | null): RequestBody {
  return makeBody(Buffer.from(JSON.stringify(value) ?? '', 'utf8'), contentType, value);
}

/** A Content-Type with its parameters in one order and case: `text/plain;charset=utf-8`. */
function normalisedType(contentType: string | null): string | null {
  if (contentType === null) return null;
  const [media, ...parameters] = contentType.split(';');
  const normalised = parameters
    .map((parameter) => parameter.trim())
    .filter((parameter) => parameter.length > 0)
    .map((parameter) => {
      const equals = parameter.indexOf('=');
      const name = (equals < 0 ? parameter : parameter.slice(0, equals)).trim().toLowerCase();
      let value = equals < 0 ? '' : parameter.slice(equals + 1).trim().replace(/^"(.*)"$/, '$1');
      if (name === 'charset') value = value.toLowerCase();
      return `${name}=${value}`;
    })
    .sort();
  return [media!.trim().toLowerCase(), ...normalised].join(';');
}

/**
 * What the fingerprint of a request covers besides its route, and the
 * volatile JSON fields to leave out (paths into the body, as declared and
 * checked when the route was defined: exchange.ts, definedRoute).
 */
export function fingerprintInput(method: string, body: RequestBody, exclude: readonly string[] | undefined): { input: unknown; exclude: string[] | undefined } {
  const excluded = exclude?.map((path) => `json.${path}`);
  if (body.json !== undefined) return { input: { method, json: body.json }, exclude: excluded };
  if (body.bytes.length === 0) return { input: { method }, exclude: undefined };
  if (mediaType(body.contentType) === 'multipart/form-data') {
    return { input: { method, multipart: multipartDigests(body.bytes, body.contentType!) }, exclude: undefined };
  }
  return { input: { method, type: normalisedType(body.contentType), sha256: hash('sha256', body.bytes, 'hex') }, exclude: undefined };
}
