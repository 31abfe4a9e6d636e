/**
 * Derived keys. A run's root key hashes its scope together with the caller's
 * key, and every step's key hashes its parent with the step's name — never its
 * position. Because the scope is inside the root, two tenants who send the same
 * key never share a derived key: job keys, inboxes and downstream services are
 * global namespaces.
 */
import { createHash } from 'node:crypto';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope, assertValidStepName } from './validate.js';

function sha256hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

function lengthPrefixed(text: string): string {
  return `${Buffer.byteLength(text, 'utf8')}:${text}`;
}

/** sha256 hex of the length-prefixed scope and key: `rootKey('acme', 'K')`. */
export function rootKey(scope: string, key: string): string {
  assertValidScope(scope);
  assertValidKey(key);
  return sha256hex(lengthPrefixed(scope) + lengthPrefixed(key));
}

/** sha256 hex of `parent + ":" + stepName`. */
export function childKey(parent: string, stepName: string): string {
  if (typeof parent !== 'string' || parent.length === 0) {
    throw new StepkeyError('invalid_key', 'A child key needs a non-empty parent key.');
  }
  if (typeof stepName !== 'string' || stepName.length === 0) {
    throw new StepkeyError('invalid_step_name', 'A child key needs a non-empty step name.');
  }
  return sha256hex(`${parent}:${stepName}`);
}

/**
 * The name under which one use of a step is recorded: the step's name, or
 * `name[id]` for a step used several times in one run. Step names cannot
 * contain `[`, so the two forms never collide.
 */
export function stepInstanceName(stepName: string, id?: string): string {
  assertValidStepName(stepName);
  if (id === undefined) return stepName;
  assertValidKey(id, `discriminator of step '${stepName}'`);
  return `${stepName}[${id}]`;
}
