/**
 * Validation of what callers hand us as keys, scopes, step names and any
 * other text that reaches SQL. Every rule fails with a StepkeyError that says
 * what was wrong, before anything is written.
 */
import { StepkeyError } from '../errors/stepkey-error.js';

export const MAX_KEY_LENGTH = 255;
export const MAX_SCOPE_LENGTH = 255;
export const MAX_STEP_NAME_LENGTH = 128;

// Printable ASCII, space included: the character set of an RFC 8941 sf-string.
const printableAscii = /^[\x20-\x7e]+$/;
const controlCharacters = /[\u0000-\u001f\u007f]/;
// Step names are contracts between deploys: letters, digits and . _ / - only,
// so that the `name[id]` form of a repeated step can never be ambiguous.
const stepNamePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/;

function describe(value: unknown): string {
  if (typeof value === 'string') return `${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  return typeof value;
}

/** An idempotency key: 1–255 printable ASCII characters. */
export function assertValidKey(key: unknown, what = 'idempotency key'): asserts key is string {
  if (typeof key !== 'string') {
    throw new StepkeyError('invalid_key', `The ${what} must be a string, got ${describe(key)}.`);
  }
  if (key.length === 0) throw new StepkeyError('invalid_key', `The ${what} is empty.`);
  if (key.length > MAX_KEY_LENGTH) {
    throw new StepkeyError(
      'invalid_key',
      `The ${what} is ${key.length} characters long; at most ${MAX_KEY_LENGTH} are allowed.`,
    );
  }
  if (!printableAscii.test(key)) {
    throw new StepkeyError(
      'invalid_key',
      `The ${what} ${describe(key)} has a character outside printable ASCII (0x20–0x7E).`,
    );
  }
}

/** A scope (tenant, caller, service): 1–255 characters, no control characters. */
export function assertValidScope(scope: unknown): asserts scope is string {
  if (typeof scope !== 'string') {
    throw new StepkeyError('invalid_scope', `The scope must be a string, got ${describe(scope)}.`);
  }
  if (scope.length === 0) throw new StepkeyError('invalid_scope', 'The scope is empty.');
  if (scope.length > MAX_SCOPE_LENGTH) {
    throw new StepkeyError(
      'invalid_scope',
      `The scope is ${scope.length} characters long; at most ${MAX_SCOPE_LENGTH} are allowed.`,
    );
  }
  if (controlCharacters.test(scope)) {
    throw new StepkeyError('invalid_scope', `The scope ${describe(scope)} contains a control character.`);
  }
}

/**
 * Text Postgres can store: a string without NUL (U+0000), the one character
 * it refuses in a text value. Every string a caller hands stepkey that
 * reaches SQL passes this (or a stricter rule) first, so that it is refused
 * as `invalid_input` naming `what`, never as a database error.
 */
export function assertStorableText(value: string, what: string): void {
  if (value.includes('\u0000')) {
    throw new StepkeyError('invalid_input', `${what} ${describe(value)} contains a NUL character (\\u0000), which Postgres cannot store in text.`);
  }
}

/** A step name such as `charge-card.v1`. */
export function assertValidStepName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new StepkeyError('invalid_step_name', `A step name must be a non-empty string, got ${describe(name)}.`);
  }
  if (name.length > MAX_STEP_NAME_LENGTH) {
    throw new StepkeyError(
      'invalid_step_name',
      `The step name ${describe(name)} is ${name.length} characters long; at most ${MAX_STEP_NAME_LENGTH} are allowed.`,
    );
  }
  if (!stepNamePattern.test(name)) {
    throw new StepkeyError(
      'invalid_step_name',
      `The step name ${describe(name)} may use only letters, digits and . _ / - and must start with a letter or digit (for example 'charge-card.v1').`,
    );
  }
}
