/**
 * The chaos suite's own checks (test/chaos), without a database: a seed
 * replays its fault plan, the leak detector tells the driver's text from
 * stepkey's public messages, and the invariants flag each kind of damage.
 */
import { describe, expect, it } from 'vitest';
import { judgeFreeze, type FreezeEnd, type FreezeStart } from '../chaos/freeze-check.js';
import { keyFailures, type KeyCheck, type Totals } from '../chaos/invariants.js';
import { leaksInternals } from '../chaos/leaks.js';
import { planFaults } from '../chaos/plan.js';
import { prng } from '../chaos/prng.js';
import type { KeyRecord } from '../chaos/load.js';

describe('the fault plan', () => {
  it('is the same for the same seed, and another for another', () => {
    expect(planFaults(prng(7), 80_000)).toEqual(planFaults(prng(7), 80_000));
    expect(planFaults(prng(8), 80_000)).not.toEqual(planFaults(prng(7), 80_000));
  });

  it('restarts Postgres twice each way, terminates backends and holds the connection limit, in order, inside the window', () => {
    for (const seed of [1, 2, 3, 42, 2 ** 31 - 1]) {
      const plan = planFaults(prng(seed), 80_000);
      const kinds = plan.map((fault) => fault.kind);
      expect(kinds.filter((kind) => kind === 'restart-fast')).toHaveLength(2);
      expect(kinds.filter((kind) => kind === 'restart-immediate')).toHaveLength(2);
      expect(kinds).toContain('terminate');
      expect(kinds).toContain('connection-limit');
      const downs = plan.flatMap((fault) => ('downMs' in fault ? [fault.downMs] : []));
      expect(downs[0]).toBeGreaterThanOrEqual(6_000);
      expect(Math.max(...downs.slice(1))).toBeLessThanOrEqual(3_000);
      const times = plan.map((fault) => fault.atMs);
      expect(times).toEqual([...times].sort((a, b) => a - b));
      expect(Math.max(...times)).toBeLessThan(80_000);
    }
  });
});

describe('the leak detector', () => {
  it('flags the driver’s words, SQL and the caller’s data', () => {
    for (const body of [
      '{"error":{"message":"sorry, too many clients already"}}',
      '{"error":{"message":"terminating connection due to administrator command"}}',
      '{"error":{"message":"Failed query: insert into \\"shop\\".\\"mailbox\\" params: acme,client3+29@example.com"}}',
      '{"error":{"message":"write CONNECTION_CLOSED 127.0.0.1:5432"}}',
      '{"error":{"message":"connect ECONNREFUSED 127.0.0.1:41469"}}',
    ]) {
      expect(leaksInternals(body), body).toBe(true);
    }
  });

  it('passes stepkey’s own answers', () => {
    for (const body of [
      '{"error":{"message":"The database is unavailable; retry after 1 s."}}',
      '{"error":{"message":"The database failed while handling this request; the server log has the details."}}',
      '{"error":{"message":"Step \'charge-card.v1\' failed; retry with the same Idempotency-Key."}}',
    ]) {
      expect(leaksInternals(body), body).toBe(false);
    }
  });
});

describe('the invariants', () => {
  const sent = (n: number): KeyRecord => ({
    tenant: 'acme',
    key: `k${n}`,
    email: `c+${n}@example.com`,
    attempts: 1,
    answer: { orderId: n, paymentId: `pay_${n}`, status: 'paid' },
  });
  const check = (n: number, changes: Partial<KeyCheck> = {}): KeyCheck => ({
    tenant: 'acme',
    key: `k${n}`,
    status: 'completed',
    orders: 1,
    order_id: String(n),
    order_status: 'paid',
    order_payment: `pay_${n}`,
    charges: 1,
    charge_id: `pay_${n}`,
    emails: 1,
    ...changes,
  });
  const totals = (changes: Partial<Totals> = {}): Totals => ({
    orders: 2,
    charges: 2,
    emails: 2,
    roots: [{ kind: 'run', status: 'completed', count: 2 }],
    jobs: { total: 0, locked: 0, due: 0, failed: 0 },
    ...changes,
  });

  it('hold for keys that each have one order, one charge and one email, and nothing left over', () => {
    expect(keyFailures([sent(1), sent(2)], [check(1), check(2)], totals())).toEqual([]);
  });

  it('flag a second charge, a missing email, a run left in progress, a locked job and a key never answered', () => {
    const unanswered = { ...sent(2), answer: undefined, failure: 'no answer before the deadline' };
    const failures = keyFailures(
      [sent(1), unanswered],
      [check(1, { charges: 2 }), check(2, { status: 'in_progress', emails: 0, order_status: 'reserved', order_payment: null })],
      totals({
        charges: 3,
        emails: 1,
        roots: [{ kind: 'run', status: 'in_progress', count: 1 }],
        jobs: { total: 1, locked: 1, due: 0, failed: 0 },
      }),
    );
    expect(failures).toEqual(
      expect.arrayContaining([
        expect.stringContaining('order with 2 charges: acme/k1'),
        expect.stringContaining('order with 0 emails: acme/k2'),
        expect.stringContaining('run in_progress, not completed: acme/k2'),
        expect.stringContaining('key without a 200'),
        '3 charges for 2 orders',
        '1 emails for 2 orders',
        '1 run row(s) left in_progress',
        '1 graphile-worker job(s) still locked',
      ]),
    );
  });

  it('flag a key whose run never reached the ledger, and an order no key accounts for', () => {
    const failures = keyFailures([sent(1)], [check(1, { status: null, orders: 0, order_id: null })], totals({ orders: 1, charges: 1, emails: 1 }));
    expect(failures).toEqual(expect.arrayContaining([expect.stringContaining('key with no run in the ledger'), '1 orders in all, for 0 keys with an order']));
  });
});

describe('the freeze check', () => {
  const run = (key: string, attempts: number, lockedUntil = '2025-01-01 00:00:08+00', status = 'in_progress') =>
    ({ scope: 'acme', key, status, attempts, token: `t-${key}-${attempts}`, lockedUntil });
  const start: FreezeStart = { consumed: 10, completed: 5, emails: 3, held: [run('api', 1), run('worker', 2)], dueJobs: [{ id: '7', attempts: 0 }] };

  it('passes when due events were consumed, a run the API held was taken over and a due job was taken', () => {
    const end: FreezeEnd = { consumed: 30, completed: 7, emails: 4, held: [run('api', 2), run('worker', 2, '2025-01-01 00:00:20+00')], dueJobs: [] };
    expect(judgeFreeze(start, end, 'freeze').failures).toEqual([]);
  });

  it('flags due work, a run the frozen API held and a queued job that stood still', () => {
    // 'api' keeps the lease it had when the API stopped; 'worker' was renewed by its (live) holder.
    const end: FreezeEnd = { consumed: 10, completed: 5, emails: 3, held: [run('api', 1), run('worker', 2, '2025-01-01 00:00:20+00')], dueJobs: [{ id: '7', attempts: 0 }] };
    expect(judgeFreeze(start, end, 'freeze').failures).toEqual([
      expect.stringContaining('no event was consumed'),
      expect.stringContaining('none of the 1 runs the frozen API held was taken over'),
      expect.stringContaining('none of the 1 jobs due'),
    ]);
  });

  it('asks nothing of runs or jobs when the API held none and none was due', () => {
    const idle: FreezeStart = { ...start, held: [], dueJobs: [] };
    expect(judgeFreeze(idle, { consumed: 11, completed: 5, emails: 3, held: [], dueJobs: [] }, 'freeze').failures).toEqual([]);
  });
});
