/**
 * A keyed call's fingerprints: what the call is for (a procedure path, a
 * route's name) and its input as the caller sent it, minus declared volatile
 * fields (keys/fingerprint.ts says what the versions cover). An input that
 * cannot be fingerprinted is a 400, before anything is claimed.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { checkedExclude, legacyPurposeFingerprint, purposeFingerprint } from '../keys/fingerprint.js';
import { Refusal } from './refusal.js';

/** A keyed call's fingerprint (v2: the input as sent), and its v1 form for rows stored before v2. */
export interface RequestFingerprints {
  fingerprint: string;
  legacyFingerprint: () => string;
}

/**
 * The fingerprints of a call: over the raw input (before a schema's defaults,
 * so that a deploy that adds a defaulted field keeps retries identical) and,
 * lazily, the legacy one over the validated input.
 */
export function fingerprintsOrBadRequest(
  purpose: string,
  input: { raw: unknown; validated: unknown },
  exclude: readonly string[] | undefined,
): RequestFingerprints {
  const options = exclude ? { exclude: [...exclude] } : {};
  try {
    return {
      fingerprint: purposeFingerprint(purpose, input.raw, options),
      legacyFingerprint: () => legacyPurposeFingerprint(purpose, input.validated, options),
    };
  } catch (error) {
    throw new Refusal(400, (error as Error).message, { cause: error });
  }
}

/**
 * A route's or a procedure's `exclude`, checked once where it is defined
 * (`where` names it): a bad path is a definition_error there, never a
 * refusal of each request — nor, as a path placed under the body's own
 * ('' as 'json.'), a field silently fingerprinted.
 */
export function definedExclude(exclude: readonly string[] | undefined, where: string): string[] | undefined {
  if (exclude === undefined) return undefined;
  try {
    return [...checkedExclude(exclude)];
  } catch (error) {
    throw new StepkeyError('definition_error', `${where}: ${(error as Error).message}`, { cause: error });
  }
}
