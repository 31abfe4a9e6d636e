import { describe, expect, it } from 'vitest';
import { NonRetryableError, isNonRetryable, serializeError, toJsonText } from '../../src/ledger/outcome.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { encodeValue } from '../../src/workflow/values.js';

describe('toJsonText', () => {
  it('keeps the value exactly as JSON.stringify writes it, key order included', () => {
    const value = { z: 1, a: [1, 'two', null], nested: { y: true, b: 2.5 } };
    expect(toJsonText(value)).toBe(JSON.stringify(value));
  });

  it('writes Dates as ISO strings and drops undefined properties', () => {
    expect(toJsonText({ at: new Date('2026-01-01T00:00:00Z'), gone: undefined })).toBe(
      '{"at":"2026-01-01T00:00:00.000Z"}',
    );
  });

  it.each([
    ['NaN', { n: Number.NaN }, /NaN is not a JSON number at \$\.n/],
    ['a bigint', { n: 1n }, /a bigint at \$\.n/],
    ['a Map', { m: new Map([[1, 2]]) }, /a Map at \$\.m/],
    ['a function', [() => 1], /a function at \$\[0\]/],
    ['undefined in an array', [undefined], /undefined at \$\[0\]/],
    ['undefined', undefined, /undefined at \$/],
  ])('refuses %s instead of storing it wrong', (_what, value, message) => {
    let caught: unknown;
    try {
      toJsonText(value);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(StepkeyError);
    expect((caught as StepkeyError).code).toBe('not_serializable');
    expect((caught as StepkeyError).message).toMatch(message);
  });

  it('names the value once: a noun after "The", or a step\'s value as its caller names it', () => {
    expect(() => toJsonText(new Map(), 'error')).toThrow(/^The error is not JSON-serialisable: a Map at \$\.$/);
    expect(() => encodeValue(new Map(), "The output of step 'charge.v1'")).toThrow(
      /^The output of step 'charge\.v1' is not JSON-serialisable: a Map at \$\.$/,
    );
  });
});

describe('errors as outcomes', () => {
  it('serialises name, message, code and data', () => {
    const error = new NonRetryableError('out of stock', { code: 'OUT_OF_STOCK', data: { sku: 'a' } });
    expect(serializeError(error)).toEqual({
      name: 'NonRetryableError',
      message: 'out of stock',
      code: 'OUT_OF_STOCK',
      data: { sku: 'a' },
    });
  });

  it('marks errors with retryable === false as deterministic', () => {
    expect(isNonRetryable(new NonRetryableError('x'))).toBe(true);
    expect(isNonRetryable(Object.assign(new Error('x'), { retryable: false }))).toBe(true);
    expect(isNonRetryable(new Error('x'))).toBe(false);
    expect(isNonRetryable(new StepkeyError('in_progress', 'busy'))).toBe(false);
  });
});
