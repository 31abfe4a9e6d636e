/**
 * Request fingerprints: sha256 hex of the canonical JSON of a value, minus its
 * volatile fields. The same key arriving with another fingerprint is a client
 * bug and is rejected, never replayed.
 */
import { createHash } from 'node:crypto';
import { canonicalJson, type CanonicalOptions } from './canonical-json.js';

export type FingerprintOptions = CanonicalOptions;

export function fingerprint(value: unknown, options: FingerprintOptions = {}): string {
  return createHash('sha256').update(canonicalJson(value, options), 'utf8').digest('hex');
}

/**
 * The fingerprint of an input together with what it is for (a procedure path or
 * a workflow name — not its version), so the same key reused on another
 * procedure is a mismatch.
 */
export function purposeFingerprint(purpose: string, input: unknown, options: FingerprintOptions = {}): string {
  const exclude = options.exclude?.map((path) => `input.${path}`);
  return fingerprint({ for: purpose, input }, exclude ? { exclude } : {});
}
