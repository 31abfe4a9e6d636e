/**
 * Error ids: what a caller is told instead of an internal error's text, and
 * what an operator searches the logs (and `stepkey inspect`) for.
 *
 *   a failed run   err-<16 hex> = sha256(len(scope):scope len(key):key error)
 *                  where error is the JSON text of the run's stored error —
 *                  so the API that answered and `stepkey inspect` reading the
 *                  ledger row name the same id, with nothing more stored
 *   anything else  err-<16 random hex>, found in the log line written with it
 */
import { createHash, randomBytes } from 'node:crypto';

const lengthPrefixed = (text: string) => `${Buffer.byteLength(text, 'utf8')}:${text}`;

/** The id of a failed run's error, from its scope, key and stored error (object, or its JSON text). */
export function failedRunErrorId(scope: string, key: string, storedError: unknown): string {
  const text = typeof storedError === 'string' ? JSON.stringify(JSON.parse(storedError)) : JSON.stringify(storedError);
  const digest = createHash('sha256').update(`${lengthPrefixed(scope)}${lengthPrefixed(key)}${text}`, 'utf8').digest('hex');
  return `err-${digest.slice(0, 16)}`;
}

/** A fresh id for an error that has no stored record. */
export function newErrorId(): string {
  return `err-${randomBytes(8).toString('hex')}`;
}
