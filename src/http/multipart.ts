/**
 * A multipart body (RFC 2046, multipart/form-data) as its fingerprint sees
 * it: the parts in order, each by its name, file name, content type and the
 * sha256 of its content. The boundary is left out — clients draw a new one
 * for every request, retries included — and so are the preamble and the
 * epilogue. A body that is not well-formed multipart is a 400.
 */
import { hash } from 'node:crypto';
import { Refusal } from '../idempotency/refusal.js';

export interface PartDigest {
  name: string | null;
  filename: string | null;
  type: string | null;
  sha256: string;
}

const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');

const malformed = (detail: string) => new Refusal(400, `The multipart request body is malformed: ${detail}.`);

/** The boundary named by a multipart Content-Type, or undefined. */
export function boundaryOf(contentType: string): string | undefined {
  const match = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return match?.[1] ?? match?.[2];
}

export function multipartDigests(bytes: Uint8Array, contentType: string): PartDigest[] {
  const boundary = boundaryOf(contentType);
  if (!boundary) throw malformed('its Content-Type names no boundary');
  const body = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const delimiter = Buffer.from(`--${boundary}`);
  const between = Buffer.concat([CRLF, delimiter]);
  // The first delimiter starts the body or a line after the preamble.
  let at = body.subarray(0, delimiter.length).equals(delimiter) ? 0 : body.indexOf(between);
  if (at < 0) throw malformed(`the boundary ${JSON.stringify(boundary)} does not occur in it`);
  if (at > 0) at += CRLF.length;
  const parts: PartDigest[] = [];
  for (;;) {
    at += delimiter.length;
    if (body[at] === 0x2d && body[at + 1] === 0x2d) return parts; // the closing delimiter
    // Transport padding may follow a delimiter before its line break.
    while (body[at] === 0x20 || body[at] === 0x09) at += 1;
    if (!body.subarray(at, at + 2).equals(CRLF)) throw malformed('a delimiter is not followed by a line break');
    at += CRLF.length;
    const next = body.indexOf(between, at);
    if (next < 0) throw malformed('the closing delimiter is missing');
    parts.push(digestPart(body.subarray(at, next)));
    at = next + CRLF.length;
  }
}

function digestPart(part: Buffer): PartDigest {
  let headerText = '';
  let content = part;
  if (!part.subarray(0, 2).equals(CRLF)) {
    const end = part.indexOf(HEADER_END);
    if (end < 0) throw malformed("a part's headers do not end with an empty line");
    headerText = part.subarray(0, end).toString('latin1');
    content = part.subarray(end + HEADER_END.length);
  } else {
    content = part.subarray(CRLF.length);
  }
  const headers = new Map<string, string>();
  for (const line of headerText.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  const disposition = headers.get('content-disposition') ?? '';
  return {
    name: parameter(disposition, 'name'),
    filename: parameter(disposition, 'filename'),
    type: headers.get('content-type')?.toLowerCase() ?? null,
    sha256: hash('sha256', content, 'hex'),
  };
}

function parameter(header: string, name: string): string | null {
  const match = new RegExp(`;\\s*${name}=(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]+))`, 'i').exec(header);
  if (!match) return null;
  return match[1] !== undefined ? match[1].replace(/\\(.)/g, '$1') : match[2]!;
}
