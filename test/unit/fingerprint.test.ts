import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/keys/canonical-json.js';
import { fingerprint, purposeFingerprint } from '../../src/keys/fingerprint.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';

describe('canonicalJson', () => {
  it('sorts object keys recursively and drops whitespace', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, 2], c: 'x' } })).toBe('{"a":{"c":"x","d":[1,2]},"b":1}');
  });

  it('keeps array order', () => {
    expect(canonicalJson([3, 1, 2])).toBe('[3,1,2]');
  });

  it('handles Date, bigint, undefined, NaN and -0 deterministically', () => {
    expect(canonicalJson(new Date('2026-01-02T03:04:05Z'))).toBe('{"$date":"2026-01-02T03:04:05.000Z"}');
    expect(canonicalJson(12345678901234567890n)).toBe('{"$bigint":"12345678901234567890"}');
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
    expect(canonicalJson([undefined])).toBe('[null]');
    expect(canonicalJson(undefined)).toBe('null');
    expect(canonicalJson([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])).toBe(
      '[{"$number":"NaN"},{"$number":"Infinity"},{"$number":"-Infinity"}]',
    );
    expect(canonicalJson(-0)).toBe('0');
  });

  it('escapes strings as JSON does', () => {
    expect(canonicalJson({ 'k"ey': 'line\nbreak \u2028' })).toBe(JSON.stringify({ 'k"ey': 'line\nbreak \u2028' }));
  });

  it('removes excluded paths, with * for any key or index', () => {
    const value = { amount: 5, meta: { traceId: 't1', source: 'web' }, items: [{ sku: 'a', clientTime: 1 }] };
    expect(canonicalJson(value, { exclude: ['meta.traceId', 'items.*.clientTime'] })).toBe(
      '{"amount":5,"items":[{"sku":"a"}],"meta":{"source":"web"}}',
    );
  });

  it.each([
    ['a function', { f: () => 1 }, /a function at \$\.f/],
    ['a symbol', [Symbol('s')], /a symbol at \$\[0\]/],
    ['a Map', { m: new Map() }, /a Map .* at \$\.m/],
    ['a class instance', { c: new (class Money {})() }, /a Money/],
    ['an invalid Date', { d: new Date('nope') }, /invalid Date at \$\.d/],
  ])('refuses %s with a typed error naming the path', (_what, value, message) => {
    expect(() => canonicalJson(value)).toThrow(message);
    expect(() => canonicalJson(value)).toThrow(StepkeyError);
  });

  it('refuses a circular reference', () => {
    const value: Record<string, unknown> = { a: 1 };
    value.self = value;
    expect(() => canonicalJson(value)).toThrow(/circular reference at \$\.self/);
  });

  it('accepts the same object twice when it is not a cycle', () => {
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
  });
});

describe('fingerprint', () => {
  it('is stable under reordered object keys', () => {
    expect(fingerprint({ amount: 100, currency: 'EUR' })).toBe(fingerprint({ currency: 'EUR', amount: 100 }));
  });

  it('changes with a reordered array or a changed value', () => {
    const base = fingerprint({ items: ['a', 'b'] });
    expect(fingerprint({ items: ['b', 'a'] })).not.toBe(base);
    expect(fingerprint({ items: ['a', 'c'] })).not.toBe(base);
  });

  it('ignores volatile fields it is told to exclude', () => {
    const a = fingerprint({ amount: 1, sentAt: 1 }, { exclude: ['sentAt'] });
    const b = fingerprint({ amount: 1, sentAt: 2 }, { exclude: ['sentAt'] });
    expect(a).toBe(b);
  });

  it('tells a number from a string and a Date from its ISO text', () => {
    expect(fingerprint({ a: 1 })).not.toBe(fingerprint({ a: '1' }));
    const date = new Date('2026-01-01T00:00:00Z');
    expect(fingerprint(date)).not.toBe(fingerprint(date.toISOString()));
  });

  it('binds the input to its purpose', () => {
    expect(purposeFingerprint('orders.create', { a: 1 })).not.toBe(purposeFingerprint('orders.refund', { a: 1 }));
    expect(purposeFingerprint('p', { a: 1, t: 1 }, { exclude: ['t'] })).toBe(
      purposeFingerprint('p', { t: 2, a: 1 }, { exclude: ['t'] }),
    );
  });
});
