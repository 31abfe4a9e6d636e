/**
 * A Node request's body for stepkey/http: read from the stream, as received,
 * up to the route's limit (413 past it). Where a body parser already ran —
 * the stream consumed (Express's express.json()), or `req.body` set by one
 * that left the stream as it was (a framework or platform that read the body
 * itself) — the parsed JSON value is fingerprinted by its canonical JSON
 * instead; any other body a parser took (a Buffer, text, a form) is refused
 * with a 500 that says how to mount the handler, since its bytes are gone and
 * its value is not JSON.
 */
import type { IncomingMessage } from 'node:http';
import { Refusal } from '../idempotency/refusal.js';
import { bodyFromBytes, bodyFromParsed, isJsonType, type RequestBody } from './request-body.js';

type ParsedRequest = IncomingMessage & { body?: unknown };

/** The request's Content-Type, or null. */
function contentTypeOf(req: IncomingMessage): string | null {
  const value = req.headers['content-type'];
  return typeof value === 'string' ? value : null;
}

function consumedByParser(req: ParsedRequest): RequestBody {
  const contentType = contentTypeOf(req);
  const { body } = req;
  const kind = body === undefined ? 'nothing' : Buffer.isBuffer(body) ? 'bytes (a Buffer)' : typeof body === 'string' ? 'text' : undefined;
  if (kind === undefined && isJsonType(contentType)) return bodyFromParsed(body, contentType);
  throw new Refusal(
    500,
    `stepkey/http: this request's body (Content-Type ${contentType ?? 'none'}) was read before the idempotent handler, which found ` +
      `${kind ?? 'a parsed non-JSON body'} in req.body; its fingerprint needs the body's bytes, or a JSON value. ` +
      'Mount the handler before any body parser (it reads the body itself), or use only express.json() in front of it.',
  );
}

/**
 * Whether a body parser ran before the handler: the stream has ended, or a
 * parser set `req.body`. An empty `{}` on a stream not yet read is not a
 * parsed body: body-parser 1.x (Express 4) sets it before deciding that the
 * request is not its content type, and leaves the bytes in the stream.
 */
function parsedBefore(req: ParsedRequest): boolean {
  if (req.readableEnded) return true;
  const { body } = req;
  if (body === undefined) return false;
  const placeholder =
    body !== null && typeof body === 'object' && Object.getPrototypeOf(body) === Object.prototype && Object.keys(body).length === 0;
  return !placeholder;
}

export async function readNodeBody(req: ParsedRequest, maxBytes: number): Promise<RequestBody> {
  if (parsedBefore(req)) return consumedByParser(req);
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    req.resume();
    throw tooLarge(maxBytes);
  }
  const bytes = await new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buffer.length;
      if (size <= maxBytes) return void chunks.push(buffer);
      // The rest is read and dropped, so that the answer can still be sent on this connection.
      req.off('data', onData);
      req.off('end', onEnd);
      req.resume();
      reject(tooLarge(maxBytes));
    };
    const onEnd = () => resolve(Buffer.concat(chunks));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', reject);
  });
  return bodyFromBytes(bytes, contentTypeOf(req));
}

export function tooLarge(maxBytes: number): Refusal {
  return new Refusal(413, `The request body is larger than ${maxBytes} bytes, the most this route reads.`);
}
