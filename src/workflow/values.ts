/**
 * Step and run values as they are stored: JSON text, with `''` for undefined.
 * A value with a schema is stored in its parsed form and parsed again on the
 * way out, every time — on first execution too — so that workflow code sees
 * exactly what a replay will give it.
 */
import type { z } from 'zod';
import { StepkeyError } from '../errors/stepkey-error.js';
import { jsonTextOf } from '../ledger/outcome.js';

/** `what` names the value at a sentence's start ("The output of step 'x'"), in every error here. */
export function encodeValue(value: unknown, what: string): string {
  return value === undefined ? '' : jsonTextOf(value, what);
}

export function decodeValue(body: string, schema: z.ZodType | undefined, what: string): unknown {
  const raw: unknown = body === '' ? undefined : JSON.parse(body);
  if (!schema) return raw;
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new StepkeyError(
      'invalid_output',
      `${what} does not match its schema when read back from JSON: ${summarise(parsed.error)}. ` +
        'Schemas of stored values must accept their own JSON form (for dates use dateField()).',
      { cause: parsed.error },
    );
  }
  return parsed.data;
}

/** Checks a fresh value against its schema and returns the text to store. */
export function encodeChecked(value: unknown, schema: z.ZodType | undefined, what: string): string {
  if (!schema) return encodeValue(value, what);
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new StepkeyError('invalid_output', `${what} does not match its schema: ${summarise(parsed.error)}.`, {
      cause: parsed.error,
    });
  }
  return encodeValue(parsed.data, what);
}

export function summarise(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
}
