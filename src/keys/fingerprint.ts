/**
 * Request fingerprints: the same key arriving with another fingerprint is a
 * client bug and is rejected, never replayed.
 *
 * Fingerprints carry their version, so that what they cover can change
 * without turning identical retries into mismatches:
 *
 *   v2 (current)  "v2:" + sha256 hex of the canonical JSON of what the
 *                 request is for (a procedure path or a workflow name — not
 *                 its version) and its input as the caller sent it, before
 *                 the schema applied defaults or transforms, minus declared
 *                 volatile fields. A deploy that adds a defaulted input field
 *                 leaves the fingerprint of the same bytes unchanged.
 *   v1 (legacy)   the bare sha256 hex of the same, over the validated input
 *                 (defaults applied). Rows stored before v2 keep it, and a
 *                 claim that meets one compares the request's v1 fingerprint.
 */
import { hash } from 'node:crypto';
import { StepkeyError } from '../errors/stepkey-error.js';
import { canonicalJson, type CanonicalOptions } from './canonical-json.js';

export type FingerprintOptions = CanonicalOptions;

export const FINGERPRINT_VERSION_PREFIX = 'v2:';

/** sha256 hex of the canonical JSON of a value, minus its volatile fields. */
export function fingerprint(value: unknown, options: FingerprintOptions = {}): string {
  return hash('sha256', canonicalJson(value, options), 'hex');
}

function purposeHash(purpose: string, input: unknown, options: FingerprintOptions): string {
  const exclude = options.exclude === undefined ? undefined : checkedExclude(options.exclude).map((path) => `input.${path}`);
  return fingerprint({ for: purpose, input }, exclude ? { exclude } : {});
}

/**
 * `exclude` as given, checked (invalid_options) before its paths are placed
 * under anything (where '' would pass as 'input.' and exclude nothing).
 */
export function checkedExclude(exclude: unknown): readonly string[] {
  if (!Array.isArray(exclude)) {
    throw new StepkeyError('invalid_options', `exclude must be an array of paths such as 'meta.traceId', got ${typeof exclude}.`);
  }
  for (const path of exclude) {
    if (typeof path !== 'string' || path.length === 0) {
      throw new StepkeyError('invalid_options', `An excluded path must be a non-empty string, got ${JSON.stringify(path) ?? String(path)}.`);
    }
  }
  return exclude as string[];
}

/**
 * The fingerprint of a request (v2): its purpose and its input as sent, so the
 * same key reused on another procedure is a mismatch.
 */
export function purposeFingerprint(purpose: string, rawInput: unknown, options: FingerprintOptions = {}): string {
  return FINGERPRINT_VERSION_PREFIX + purposeHash(purpose, rawInput, options);
}

/** The v1 fingerprint (validated input), for rows stored before v2. */
export function legacyPurposeFingerprint(purpose: string, validatedInput: unknown, options: FingerprintOptions = {}): string {
  return purposeHash(purpose, validatedInput, options);
}

/** Whether a stored fingerprint is a v1 one (a bare 64-character hex digest). */
export function isLegacyFingerprint(stored: string | null | undefined): stored is string {
  return typeof stored === 'string' && /^[0-9a-f]{64}$/.test(stored);
}
