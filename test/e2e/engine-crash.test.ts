/**
 * A run killed with SIGKILL at every step boundary resumes — by a retry with
 * the same key, and by another process's sweeper — with every effect applied
 * exactly once and the result of an uninterrupted run.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childKey } from '../../src/keys/derive.js';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { chargeId, startPaymentService, type PaymentService } from '../../workflows/payments/service.js';
import { MERCHANT } from '../helpers/scripts/crash-workflow.js';
import { useTestDatabase } from '../helpers/database.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/crash-workflow.ts', import.meta.url));
const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200' };
let payments: PaymentService;
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table crash_reservations (run_key text not null, sku text not null, quantity int not null)`;
  await db().sql`create table crash_shipments (run_key text not null, payment_id text not null)`;
  payments = await startPaymentService({ database: db() });
});

afterAll(async () => {
  for (const child of children) child.kill();
  await payments?.close();
});

function spawn(args: string[], faults?: string, extraEnv: Record<string, string> = {}): ChildHandle {
  const child = spawnScript(script, {
    args: [args[0]!, db().url, payments.url, ...args.slice(1)],
    env: { ...env, ...extraEnv },
    ...(faults ? { faults } : {}),
  });
  children.push(child);
  return child;
}

/** The root the run's keys derive from, as its row stored it. */
const runRoot = (scope: string, key: string) => storedRoot(db(), { scope, key });

async function expected(scope: string, key: string) {
  const paymentId = chargeId(MERCHANT, childKey(await runRoot(scope, key), 'charge.v1'));
  return { reservation: 'sku-1x2', paymentId, shipment: `ship-${paymentId}` };
}

async function effects(scope: string, key: string) {
  const runKey = await runRoot(scope, key);
  const [reservations] = await db().sql`select count(*)::int as n from crash_reservations where run_key = ${runKey}`;
  const [charges] = await db().sql`select count(*)::int as n from payments.charges where reference = ${runKey}`;
  const [shipments] = await db().sql`select count(*)::int as n from crash_shipments where run_key = ${runKey}`;
  return { reservations: reservations!.n, charges: charges!.n, shipments: shipments!.n };
}

async function storedResult(scope: string, key: string): Promise<unknown> {
  const [row] = await db().sql`select status, outcome from stepkey.ledger where scope = ${scope} and key = ${key}`;
  return row?.status === 'completed' ? JSON.parse(row.outcome as string) : undefined;
}

const faultPoints = [
  'engine.before-step:reserve.v1',
  'engine.after-step-commit:reserve.v1',
  'engine.before-step:charge.v1',
  'engine.in-call:charge.v1',
  'engine.after-step-commit:charge.v1',
  'engine.before-step:ship.v1',
  'engine.after-step-commit:ship.v1',
  'engine.before-complete:crash-order',
];

describe('a run killed at every step boundary', () => {
  it('resumes by retry and by sweeper, every effect exactly once, result as if uninterrupted', async () => {
    const control = { scope: 'tenant-a', key: uniqueKey('control') };
    const uninterrupted = spawn(['run', control.scope, control.key]);
    const [, controlJson] = (await uninterrupted.waitFor(/RESULT (.+)/, PATIENCE_MS)) as unknown as [string, string];
    expect(JSON.parse(controlJson)).toEqual(await expected(control.scope, control.key));

    const cases = faultPoints.flatMap((fault) =>
      (['retry', 'sweeper'] as const).map((resumeBy) => ({ fault, resumeBy, scope: 'tenant-a', key: uniqueKey('crash') })),
    );
    // Resumed by retry: engine.run(), whose start commits with the first step (a run killed
    // before it left nothing, and the retry starts it). Resumed by the sweeper: engine.start(),
    // whose start commits first, so even a run killed before its first step is there to resume.
    const crashed = cases.map((c) => spawn([c.resumeBy === 'retry' ? 'run' : 'start', c.scope, c.key], c.fault));
    const exits = await Promise.all(crashed.map((child) => child.exited));
    exits.forEach((exit, i) => expect(exit.signal, `${cases[i]!.fault} should have killed the run`).toBe('SIGKILL'));

    // engine.run() killed before its first step committed: nothing of the run exists.
    const beforeFirst = cases.find((c) => c.resumeBy === 'retry' && c.fault === 'engine.before-step:reserve.v1')!;
    expect(await db().sql`select 1 from stepkey.ledger where scope = ${beforeFirst.scope} and key = ${beforeFirst.key}`).toHaveLength(0);
    // …and no business write committed without the run that made it.
    expect(await db().sql`select run_key from crash_reservations where run_key not in (select root_key from stepkey.ledger where root_key is not null)`).toHaveLength(0);

    const sweeper = spawn(['sweep']);
    await sweeper.waitFor(/SWEEPER READY/, PATIENCE_MS);
    const retries = cases
      .filter((c) => c.resumeBy === 'retry')
      .map(async (c) => {
        const child = spawn(['run', c.scope, c.key]);
        const [, json] = (await child.waitFor(/RESULT (.+)/, PATIENCE_MS)) as unknown as [string, string];
        return { c, result: JSON.parse(json) as unknown };
      });

    for (const { c, result } of await Promise.all(retries)) {
      expect(result, `${c.fault} resumed by retry`).toEqual(await expected(c.scope, c.key));
    }
    for (const c of cases) {
      await expect
        .poll(() => storedResult(c.scope, c.key), { interval: 200, message: `${c.fault} by ${c.resumeBy}` })
        .toBeDefined();
      expect(await storedResult(c.scope, c.key)).toEqual(await expected(c.scope, c.key));
      expect(await effects(c.scope, c.key), `${c.fault} resumed by ${c.resumeBy}`).toEqual({
        reservations: 1,
        charges: 1,
        shipments: 1,
      });
      // Killed inside the call: the payment service was asked at least twice and charged once, and the
      // effect record counted every request (a resumed call that lost its lease under load asks again).
      const chargeKey = childKey(await runRoot(c.scope, c.key), 'charge.v1');
      if (c.fault === 'engine.in-call:charge.v1') {
        const [recorded] = await db().sql<{ n: number }[]>`
          select count(*)::int as n from stepkey.step_attempts where scope = ${c.scope} and run_key = ${c.key} and step = 'charge.v1'`;
        expect(payments.requestsFor(chargeKey)).toBeGreaterThanOrEqual(2);
        expect(recorded?.n, `${c.fault} by ${c.resumeBy}: attempts recorded`).toBe(payments.requestsFor(chargeKey));
      }
    }
    sweeper.kill();
  });

  it('lets one of two processes resuming the same run proceed; the other replays', async () => {
    const ref = { scope: 'tenant-a', key: uniqueKey('twice') };
    const crashed = spawn(['run', ref.scope, ref.key], 'engine.after-step-commit:reserve.v1');
    expect((await crashed.exited).signal).toBe('SIGKILL');
    const both = [spawn(['run', ref.scope, ref.key]), spawn(['run', ref.scope, ref.key])];
    const results = await Promise.all(both.map(async (child) => JSON.parse((await child.waitFor(/RESULT (.+)/, PATIENCE_MS))[1]!)));
    const want = await expected(ref.scope, ref.key);
    expect(results).toEqual([want, want]);
    expect(await effects(ref.scope, ref.key)).toEqual({ reservations: 1, charges: 1, shipments: 1 });
  });

  it('gives its lease up on SIGTERM, so another process resumes the run at once, not after the lease', async () => {
    const ref = { scope: 'tenant-a', key: uniqueKey('deploy') };
    payments.delayMs = 1_500;
    try {
      // An hour's lease: the run completing within the test's patience shows it was given up.
      const longLease = { STEPKEY_LEASE_MS: '3600000', STEPKEY_SWEEP_INTERVAL_MS: '200' };
      const sweeper = spawn(['sweep'], undefined, longLease);
      await sweeper.waitFor(/SWEEPER READY/, PATIENCE_MS);
      const running = spawn(['run', ref.scope, ref.key], undefined, longLease);
      await expect.poll(async () => (await db().sql`select root_key from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`).length, { interval: 20 }).toBe(1);
      const chargeKey = childKey(await runRoot(ref.scope, ref.key), 'charge.v1');
      await expect.poll(() => payments.requestsFor(chargeKey), { interval: 20 }).toBe(1);
      running.kill('SIGTERM');
      expect((await running.exited).code).toBe(0);
      await expect.poll(() => storedResult(ref.scope, ref.key), { interval: 100 }).toBeDefined();
      expect(await storedResult(ref.scope, ref.key)).toEqual(await expected(ref.scope, ref.key));
      expect(await effects(ref.scope, ref.key)).toEqual({ reservations: 1, charges: 1, shipments: 1 });
      sweeper.kill();
    } finally {
      payments.delayMs = 0;
    }
  });
});
