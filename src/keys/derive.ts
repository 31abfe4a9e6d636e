/**
 * Derived keys. A run's root key hashes its scope, the caller's key and the
 * run's identity (a UUID minted when the run is first claimed, stored with
 * it), and every step's key hashes its parent with the step's name — never
 * its position.
 *
 *   root = sha256(len(scope) ":" scope  len(key) ":" key  len(id) ":" id)
 *   step = sha256(root ":" stepName)
 *
 * Because the scope is inside the root, two tenants who send the same key
 * never share a derived key: job keys, inboxes and downstream services are
 * global namespaces. Because the identity is inside it, a key reused after its
 * retention starts a run whose derived keys are new (a payment service or an
 * inbox that remembers keys longer than the ledger never replays the old
 * run's outcome into the new one), while a resumed run reads its stored root
 * and keeps its keys. Rows written before roots were stored were derived
 * without an identity (`rootKey(scope, key)`), and keep that root.
 */
import { hash, randomUUID } from 'node:crypto';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope, assertValidStepName } from './validate.js';

function sha256hex(text: string): string {
  return hash('sha256', text, 'hex');
}

function lengthPrefixed(text: string): string {
  return `${Buffer.byteLength(text, 'utf8')}:${text}`;
}

/**
 * sha256 hex of the length-prefixed scope, key and run identity:
 * `rootKey('acme', 'K', runId)`. Without an identity, the root of a row
 * stored before identities existed.
 */
export function rootKey(scope: string, key: string, identity?: string): string {
  assertValidScope(scope);
  assertValidKey(key);
  if (identity === undefined) return sha256hex(lengthPrefixed(scope) + lengthPrefixed(key));
  if (typeof identity !== 'string' || identity.length === 0) {
    throw new StepkeyError('invalid_key', 'A root key identity must be a non-empty string.');
  }
  return sha256hex(lengthPrefixed(scope) + lengthPrefixed(key) + lengthPrefixed(identity));
}

/** A new run's root: derived from a fresh identity. */
export function newRootKey(scope: string, key: string): string {
  return rootKey(scope, key, randomUUID());
}

/** The root a stored row derives from: the one it stored, or (rows from before roots were stored) the legacy one. */
export function storedRootKey(scope: string, key: string, stored: string | null | undefined): string {
  return stored ?? rootKey(scope, key);
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
