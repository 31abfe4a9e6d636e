/** Asserting that a synchronous call is refused with a StepkeyError whose message says what was wrong. */
import { expect } from 'vitest';
import { isStepkeyError } from '../../src/errors/stepkey-error.js';

/** `make()` throws a StepkeyError (with `code`, when given) whose message matches `pattern`. */
export function expectRefused(make: () => unknown, pattern: RegExp, code?: string): void {
  let caught: unknown;
  try {
    make();
  } catch (error) {
    caught = error;
  }
  expect(isStepkeyError(caught)).toBe(true);
  if (code !== undefined) expect(caught).toMatchObject({ code });
  expect((caught as Error).message).toMatch(pattern);
}
