import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/keys/fingerprint.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';

const db = useTestDatabase();

describe('claim (split form)', () => {
  it('owns a new key, then answers in progress to a duplicate without writing', async () => {
    const ledger = testLedger(db(), { leaseMs: LONG_LEASE_MS });
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: fingerprint({ amount: 1 }) };
    const first = await ledger.claim(request);
    expect(first.state).toBe('owned');
    const before = await ledger.get({ scope: 'acme', key });

    const second = await ledger.claim(request);
    expect(second).toMatchObject({ state: 'in_progress' });
    if (second.state === 'in_progress') {
      // Retry after the rest of the lease: most of it (a busy host may take a while between the two claims).
      expect(second.retryAfterMs).toBeGreaterThan(LONG_LEASE_MS / 2);
      expect(second.retryAfterMs).toBeLessThanOrEqual(LONG_LEASE_MS);
    }
    expect(await ledger.get({ scope: 'acme', key })).toEqual(before);
  });

  it('replays the stored outcome byte for byte, and a replay writes nothing', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: fingerprint({ amount: 1 }) };
    const claim = await ledger.claim(request);
    if (claim.state !== 'owned') throw new Error('expected to own the key');
    const body = '{"z":1,  "a":"ünïcødé","list":[3,1,2]}';
    expect(await ledger.complete(claim.lease, { ok: true, body, code: 201 })).toBe(true);
    const stored = await ledger.get({ scope: 'acme', key });

    const replay = await ledger.claim(request);
    expect(replay).toEqual({ state: 'replay', outcome: { status: 'completed', ok: true, body, code: 201 }, rootKey: null, version: null });
    const xminBefore = await db().sql`select xmin::text from stepkey.ledger where key = ${key}`;
    await ledger.claim(request);
    const xminAfter = await db().sql`select xmin::text from stepkey.ledger where key = ${key}`;
    expect(xminAfter).toEqual(xminBefore);
    expect(await ledger.get({ scope: 'acme', key })).toEqual(stored);
  });

  it('replays for reordered object keys; a changed payload or reordered array is a mismatch', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const claim = await ledger.claim({ scope: 'acme', key, fingerprint: fingerprint({ a: 1, items: [1, 2] }), name: 'orders.create' });
    if (claim.state !== 'owned') throw new Error('expected to own the key');
    await ledger.completeWith(claim.lease, { id: 7 });
    const stored = await ledger.get({ scope: 'acme', key });

    const reordered = await ledger.claim({ scope: 'acme', key, fingerprint: fingerprint({ items: [1, 2], a: 1 }) });
    expect(reordered).toMatchObject({ state: 'replay', outcome: { body: '{"id":7}' } });

    const changed = await ledger.claim({ scope: 'acme', key, fingerprint: fingerprint({ a: 2, items: [1, 2] }) });
    expect(changed).toEqual({ state: 'mismatch', existing: { kind: 'request', name: 'orders.create' } });
    const reorderedArray = await ledger.claim({ scope: 'acme', key, fingerprint: fingerprint({ a: 1, items: [2, 1] }) });
    expect(reorderedArray.state).toBe('mismatch');
    expect(await ledger.get({ scope: 'acme', key })).toEqual(stored);
  });

  it('keeps the same key in two scopes apart', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const fp = fingerprint({ amount: 1 });
    const a = await ledger.claim({ scope: 'tenant-a', key, fingerprint: fp });
    const b = await ledger.claim({ scope: 'tenant-b', key, fingerprint: fp });
    if (a.state !== 'owned' || b.state !== 'owned') throw new Error('both scopes should own the key');
    await ledger.completeWith(a.lease, { tenant: 'a' });
    await ledger.completeWith(b.lease, { tenant: 'b' });
    expect(await ledger.claim({ scope: 'tenant-a', key, fingerprint: fp })).toMatchObject({ outcome: { body: '{"tenant":"a"}' } });
    expect(await ledger.claim({ scope: 'tenant-b', key, fingerprint: fp })).toMatchObject({ outcome: { body: '{"tenant":"b"}' } });
  });

  it('releases a key after a retryable failure so the retry owns it', async () => {
    const ledger = testLedger(db());
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp' };
    const first = await ledger.claim(request);
    if (first.state !== 'owned') throw new Error('expected to own the key');
    expect(await ledger.release(first.lease)).toBe(true);
    expect((await ledger.claim(request)).state).toBe('owned');
  });

  it('refuses bad input with a typed error and writes nothing', async () => {
    const ledger = testLedger(db());
    const count = async () => (await db().sql`select count(*)::int as n from stepkey.ledger`)[0]!.n as number;
    const before = await count();
    const cases: [object, string][] = [
      [{ scope: 'acme', key: '', fingerprint: 'fp' }, 'invalid_key'],
      [{ scope: 'acme', key: 'k'.repeat(256), fingerprint: 'fp' }, 'invalid_key'],
      [{ scope: 'acme', key: 'naïve', fingerprint: 'fp' }, 'invalid_key'],
      [{ scope: '', key: 'k', fingerprint: 'fp' }, 'invalid_scope'],
      [{ scope: 'acme', key: 'k', fingerprint: '' }, 'invalid_input'],
      [{ scope: 'acme', key: 'k', fingerprint: 'fp', kind: 'step' }, 'invalid_input'],
      [{ scope: 'acme', key: 'k', fingerprint: 'fp', kind: 'thing' }, 'invalid_input'],
    ];
    for (const [request, code] of cases) {
      const error = await ledger.claim(request as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StepkeyError);
      expect((error as StepkeyError).code).toBe(code);
    }
    const claim = await ledger.claim({ scope: 'acme', key: uniqueKey(), fingerprint: 'fp' });
    if (claim.state !== 'owned') throw new Error('expected to own the key');
    const error = await ledger.completeWith(claim.lease, { n: Number.NaN }).catch((e: unknown) => e);
    expect((error as StepkeyError).code).toBe('not_serializable');
    expect(await ledger.get(claim.lease)).toMatchObject({ status: 'in_progress', outcome: null });
    expect(await count()).toBe(before + 1);
  });
});

describe('leases and takeover', () => {
  it('takes over an expired lease with the same fingerprint and fences the old holder out', async () => {
    const ledger = testLedger(db(), { leaseMs: LONG_LEASE_MS });
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp-1' };
    const old = await ledger.claim(request);
    if (old.state !== 'owned') throw new Error('expected to own the key');

    ledger.clock.advance(LONG_LEASE_MS / 2);
    expect((await ledger.claim(request)).state).toBe('in_progress');
    ledger.clock.advance(LONG_LEASE_MS);

    const other = await ledger.claim({ ...request, fingerprint: 'fp-2' });
    expect(other.state).toBe('mismatch');

    const taken = await ledger.claim(request);
    expect(taken).toMatchObject({ state: 'owned', attempts: 2, resumed: true });
    if (taken.state !== 'owned') return;

    expect(await ledger.complete(old.lease, { ok: true, body: '"late"' })).toBe(false);
    expect(await ledger.release(old.lease)).toBe(false);
    expect(await ledger.heartbeat(old.lease)).toBe(false);
    expect(await ledger.complete(taken.lease, { ok: true, body: '"new holder"' })).toBe(true);
    expect(await ledger.claim(request)).toMatchObject({ state: 'replay', outcome: { body: '"new holder"' } });
  });

  it('never takes over a key with another fingerprint, even when its lease expired', async () => {
    const ledger = testLedger(db(), { leaseMs: LONG_LEASE_MS });
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp-1' };
    const first = await ledger.claim(request);
    ledger.clock.advance(2 * LONG_LEASE_MS);
    expect((await ledger.claim({ ...request, fingerprint: 'fp-2' })).state).toBe('mismatch');
    expect(await ledger.get(request)).toMatchObject({
      fingerprint: 'fp-1',
      leaseToken: first.state === 'owned' ? first.lease.token : 'x',
    });
  });

  it('lets exactly one of many contenders take over an expired lease', async () => {
    // The winner's new lease outlasts the race however slowly the other nine claims run.
    const ledger = testLedger(db(), { leaseMs: LONG_LEASE_MS });
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp' };
    await ledger.claim(request);
    ledger.clock.advance(2 * LONG_LEASE_MS);
    const results = await Promise.all(Array.from({ length: 10 }, () => ledger.claim(request)));
    expect(results.filter((r) => r.state === 'owned')).toHaveLength(1);
    expect(results.filter((r) => r.state === 'in_progress')).toHaveLength(9);
  });

  it('a heartbeat keeps a long-running claim from being taken over', async () => {
    const ledger = testLedger(db(), { leaseMs: LONG_LEASE_MS });
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp' };
    const claim = await ledger.claim(request);
    if (claim.state !== 'owned') throw new Error('expected to own the key');
    // Five leases' time in all, most of a lease between two beats.
    for (let i = 0; i < 5; i += 1) {
      ledger.clock.advance(LONG_LEASE_MS * 0.8);
      expect(await ledger.heartbeat(claim.lease)).toBe(true);
    }
    expect((await ledger.claim(request)).state).toBe('in_progress');
  });

  it('resumes a failed key with the same fingerprint only', async () => {
    const ledger = testLedger(db());
    const request = { scope: 'acme', key: uniqueKey(), fingerprint: 'fp', kind: 'run' as const };
    const claim = await ledger.claim(request);
    if (claim.state !== 'owned') throw new Error('expected to own the key');
    expect(await ledger.fail(claim.lease, new Error('payment service down'))).toBe(true);
    expect(await ledger.get(request)).toMatchObject({ status: 'failed', outcome: null });
    expect(JSON.parse((await ledger.get(request))!.lastError!)).toMatchObject({ message: 'payment service down' });
    expect((await ledger.claim({ ...request, fingerprint: 'other' })).state).toBe('mismatch');
    expect(await ledger.claim(request)).toMatchObject({ state: 'owned', resumed: true, attempts: 2 });
  });
});
