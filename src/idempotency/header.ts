/**
 * Reading the Idempotency-Key header (IETF httpapi draft "The
 * Idempotency-Key HTTP Header Field"): an RFC 8941 sf-string, "like-this".
 * stepkey also accepts a bare token (Stripe's clients send one): printable
 * ASCII without '"', ',' or spaces. Either way the key is 1–255 printable
 * ASCII characters. Several keys (several header lines, or a list) are
 * refused: one request, one key.
 */
import { isStepkeyError } from '../errors/stepkey-error.js';
import { MAX_KEY_LENGTH, assertValidKey } from '../keys/validate.js';

export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';

export type ParsedKey = { ok: true; key: string } | { ok: false; reason: 'missing' | 'malformed' | 'several' | 'too_long'; message: string };

const malformed = (detail: string): ParsedKey => ({
  ok: false,
  reason: 'malformed',
  message: `The ${IDEMPOTENCY_KEY_HEADER} header is malformed: ${detail}. Send one key as a quoted string, e.g. ${IDEMPOTENCY_KEY_HEADER}: "8e03978e-40d5-43e8-bc93-6894a57f9324".`,
});

/** `values`: every line of the header as received (Node's rawHeaders), or the joined value. */
export function parseIdempotencyKey(values: readonly string[]): ParsedKey {
  if (values.length === 0) {
    return { ok: false, reason: 'missing', message: `This operation needs an ${IDEMPOTENCY_KEY_HEADER} header.` };
  }
  if (values.length > 1) {
    return { ok: false, reason: 'several', message: `Send one ${IDEMPOTENCY_KEY_HEADER} header, not ${values.length}.` };
  }
  const text = values[0]!.trim();
  if (text.length === 0) return malformed('it is empty');
  const key = text.startsWith('"') ? parseSfString(text) : parseBareToken(text);
  if (typeof key !== 'string') return key;
  if (key.length === 0) return malformed('the key is empty');
  // The parse above admits printable ASCII only: what is left to check is the ledger's own rule (length).
  try {
    assertValidKey(key, IDEMPOTENCY_KEY_HEADER);
  } catch (error) {
    if (!isStepkeyError(error, 'invalid_key')) throw error;
    return { ok: false, reason: key.length > MAX_KEY_LENGTH ? 'too_long' : 'malformed', message: error.message };
  }
  return { ok: true, key };
}

function parseSfString(text: string): string | ParsedKey {
  let key = '';
  for (let i = 1; i < text.length; i += 1) {
    const char = text[i]!;
    const code = char.charCodeAt(0);
    if (char === '\\') {
      const next = text[i + 1];
      if (next !== '"' && next !== '\\') return malformed('a backslash may only escape " or \\');
      key += next;
      i += 1;
    } else if (char === '"') {
      const rest = text.slice(i + 1).trim();
      if (rest.startsWith(',')) {
        return { ok: false, reason: 'several', message: `Send one ${IDEMPOTENCY_KEY_HEADER}, not a list of keys.` };
      }
      if (rest.length > 0) return malformed('unexpected characters after the closing quote');
      return key;
    } else if (code < 0x20 || code > 0x7e) {
      return malformed('only printable ASCII characters are allowed');
    } else {
      key += char;
    }
  }
  return malformed('the closing quote is missing');
}

function parseBareToken(text: string): string | ParsedKey {
  if (text.includes(',')) {
    return { ok: false, reason: 'several', message: `Send one ${IDEMPOTENCY_KEY_HEADER}, not a list of keys.` };
  }
  if (!/^[\x21-\x7e]+$/.test(text) || text.includes('"')) {
    return malformed('an unquoted key may contain printable ASCII characters only, without spaces or quotes');
  }
  return text;
}
