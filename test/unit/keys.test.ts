import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { childKey, rootKey, stepInstanceName } from '../../src/keys/derive.js';
import { assertValidKey, assertValidScope, assertValidStepName } from '../../src/keys/validate.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';

const sha = (text: string) => createHash('sha256').update(text).digest('hex');

describe('rootKey', () => {
  it('is sha256 hex of the length-prefixed scope and key', () => {
    expect(rootKey('acme', 'K-1')).toBe(sha('4:acme3:K-1'));
    expect(rootKey('acme', 'K-1')).toMatch(/^[0-9a-f]{64}$/);
  });

  it('differs between tenants who send the same key', () => {
    expect(rootKey('tenant-a', 'K')).not.toBe(rootKey('tenant-b', 'K'));
  });

  it('cannot be forged by moving characters between scope and key', () => {
    expect(rootKey('ab', 'c')).not.toBe(rootKey('a', 'bc'));
    expect(rootKey('a:1', 'b')).not.toBe(rootKey('a', '1b'));
  });

  it('counts UTF-8 bytes in the scope prefix', () => {
    expect(rootKey('café', 'k')).toBe(sha('5:café1:k'));
  });
});

describe('childKey', () => {
  it("is sha256 hex of parent + ':' + step name", () => {
    const root = rootKey('acme', 'K');
    expect(childKey(root, 'charge-card.v1')).toBe(sha(`${root}:charge-card.v1`));
  });

  it('depends on the name, never on the order of derivation', () => {
    const root = rootKey('acme', 'K');
    const first = [childKey(root, 'a.v1'), childKey(root, 'b.v1')];
    const second = [childKey(root, 'b.v1'), childKey(root, 'a.v1')].reverse();
    expect(first).toEqual(second);
  });

  it('gives two tenants different child keys for the same key and step', () => {
    expect(childKey(rootKey('a', 'K'), 's.v1')).not.toBe(childKey(rootKey('b', 'K'), 's.v1'));
  });

  it('refuses an empty parent or step name', () => {
    expect(() => childKey('', 'x')).toThrow(StepkeyError);
    expect(() => childKey('p', '')).toThrow(/step name/);
  });
});

describe('stepInstanceName', () => {
  it('is the name alone, or name[id] for a repeated step', () => {
    expect(stepInstanceName('reserve.v1')).toBe('reserve.v1');
    expect(stepInstanceName('reserve.v1', 'sku-9')).toBe('reserve.v1[sku-9]');
  });

  it('validates the discriminator like a key', () => {
    expect(() => stepInstanceName('reserve.v1', '')).toThrow(/discriminator/);
  });
});

describe('key validation', () => {
  it('accepts 1–255 printable ASCII characters', () => {
    expect(() => assertValidKey('a')).not.toThrow();
    expect(() => assertValidKey('x'.repeat(255))).not.toThrow();
    expect(() => assertValidKey('order 8812 / "retry"')).not.toThrow();
  });

  it.each([
    ['an empty key', '', /empty/],
    ['a key over 255 characters', 'x'.repeat(256), /256 characters long; at most 255/],
    ['a non-ASCII key', 'clé', /printable ASCII/],
    ['a key with a newline', 'a\nb', /printable ASCII/],
    ['a number', 42, /must be a string/],
  ])('rejects %s with a clear error', (_what, key, message) => {
    let caught: unknown;
    try {
      assertValidKey(key);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(StepkeyError);
    expect((caught as StepkeyError).code).toBe('invalid_key');
    expect((caught as StepkeyError).message).toMatch(message);
  });

  it('rejects an empty or control-character scope', () => {
    expect(() => assertValidScope('')).toThrow(/scope is empty/);
    expect(() => assertValidScope('a\u0000b')).toThrow(/control character/);
    expect(() => assertValidScope('tenant:acme/user 7')).not.toThrow();
  });

  it('accepts versioned step names and rejects others', () => {
    expect(() => assertValidStepName('charge-card.v1')).not.toThrow();
    expect(() => assertValidStepName('orders/reserve_stock.v2')).not.toThrow();
    expect(() => assertValidStepName('')).toThrow(/non-empty/);
    expect(() => assertValidStepName('charge card')).toThrow(/letters, digits/);
    expect(() => assertValidStepName('a[1]')).toThrow(/letters, digits/);
    expect(() => assertValidStepName('x'.repeat(129))).toThrow(/at most 128/);
  });
});
