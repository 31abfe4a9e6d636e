import { describe, expect, it } from 'vitest';
import { parseIdempotencyKey } from '../../src/idempotency/header.js';
import { idempotencyHeaders, isRetryableError } from '../../src/trpc/link.js';

describe('parseIdempotencyKey', () => {
  it('reads an sf-string, with escapes', () => {
    expect(parseIdempotencyKey(['"8e03978e-40d5"'])).toEqual({ ok: true, key: '8e03978e-40d5' });
    expect(parseIdempotencyKey([' "a\\"b\\\\c" '])).toEqual({ ok: true, key: 'a"b\\c' });
    expect(parseIdempotencyKey(['"with, comma and space"'])).toEqual({ ok: true, key: 'with, comma and space' });
  });

  it('reads a bare token', () => {
    expect(parseIdempotencyKey(['order-8812_retry'])).toEqual({ ok: true, key: 'order-8812_retry' });
  });

  it.each([
    [[], 'missing', /needs an Idempotency-Key header/],
    [['"a"', '"b"'], 'several', /one Idempotency-Key header, not 2/],
    [['"a", "b"'], 'several', /not a list/],
    [['a,b'], 'several', /not a list/],
    [['"abc'], 'malformed', /closing quote is missing/],
    [['"a"b'], 'malformed', /after the closing quote/],
    [['"a\\nb"'], 'malformed', /backslash may only escape/],
    [['"é"'], 'malformed', /printable ASCII/],
    [['two words'], 'malformed', /without spaces or quotes/],
    [['""'], 'malformed', /empty/],
    [['   '], 'malformed', /empty/],
    [[`"${'k'.repeat(256)}"`], 'too_long', /256 characters long; at most 255/],
  ])('refuses %j as %s', (values, reason, message) => {
    const parsed = parseIdempotencyKey(values as string[]);
    expect(parsed).toMatchObject({ ok: false, reason });
    if (!parsed.ok) expect(parsed.message).toMatch(message);
  });
});

describe('the client link', () => {
  it('sends the key as a quoted sf-string', () => {
    const op = { context: { idempotencyKey: 'k"1' } } as never;
    expect(idempotencyHeaders(op)).toEqual({ 'Idempotency-Key': '"k\\"1"' });
    expect(idempotencyHeaders({ context: {} } as never)).toEqual({});
  });

  it('retries network errors, 409, 429 and 5xx; not other 4xx', () => {
    const withStatus = (httpStatus: number) => ({ data: { httpStatus } });
    expect(isRetryableError(new TypeError('fetch failed'))).toBe(true);
    for (const status of [408, 409, 429, 500, 502, 503, 504]) expect(isRetryableError(withStatus(status))).toBe(true);
    for (const status of [400, 401, 403, 404, 412, 422]) expect(isRetryableError(withStatus(status))).toBe(false);
    expect(isRetryableError({ name: 'AbortError' })).toBe(false);
  });
});
