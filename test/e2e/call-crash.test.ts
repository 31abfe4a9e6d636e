/**
 * A call step killed with SIGKILL at each of its points — before the call
 * (its attempt recorded), after the callee answered (before the outcome
 * committed), after the outcome committed — and resumed: the attempt history
 * `stepkey inspect` shows matches what the callee counted, every time.
 * reconcile keeps the second call from being made; atMostOnce stops the run
 * for review, and `stepkey resolve` completes it with the operator's output.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childKey } from '../../src/keys/derive.js';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { createEngine } from '../../src/engine/engine.js';
import { chargeId, startPaymentService, type PaymentService } from '../../workflows/payments/service.js';
import { runCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { callCrash, MERCHANT, variants, type Variant } from '../helpers/scripts/call-crash.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/call-crash.ts', import.meta.url));
const app = fileURLToPath(new URL('../helpers/scripts/call-crash.app.ts', import.meta.url));
const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200' };
let payments: PaymentService;
const children: ChildHandle[] = [];

beforeAll(async () => {
  payments = await startPaymentService({ database: db() });
});
afterAll(async () => {
  for (const child of children) child.kill();
  await payments?.close();
});

function run(variant: Variant, ref: { scope: string; key: string }, faults?: string): ChildHandle {
  const child = spawnScript(script, { args: ['run', db().url, payments.url, variant, ref.scope, ref.key], env, ...(faults ? { faults } : {}) });
  children.push(child);
  return child;
}

type Attempt = { attempt: number; outcome: string; endedAt: string | null; resolution?: string };

async function inspectCharge(ref: { scope: string; key: string }) {
  const result = await runCli(['inspect', ref.key, '--scope', ref.scope, '--json'], { databaseUrl: db().url });
  expect(result.code, result.stderr).toBe(0);
  const [match] = result.json<{ matches: { status: string; items: { name: string; attempts: Attempt[]; effect: { mayHaveSeen: number } | null }[] }[] }>().matches;
  const item = match!.items.find((i) => i.name === 'charge.v1')!;
  const text = await runCli(['inspect', ref.key, '--scope', ref.scope], { databaseUrl: db().url });
  return { status: match!.status, attempts: item.attempts, text: text.stdout };
}

const points = ['engine.before-call:charge.v1', 'engine.in-call:charge.v1', 'engine.after-step-commit:charge.v1'] as const;

describe('a call step killed at each of its points', () => {
  const cases = variants.flatMap((variant) => points.map((fault) => ({ variant, fault })));

  it('keeps an attempt history that matches what the callee counted', async () => {
    const refs = cases.map(() => ({ scope: 'acme', key: uniqueKey('call-crash') }));
    const killed = await Promise.all(cases.map((c, i) => run(c.variant, refs[i]!, c.fault).exited));
    killed.forEach((exit, i) => expect(exit.signal, `${cases[i]!.variant} ${cases[i]!.fault}`).toBe('SIGKILL'));
    const resumed = await Promise.all(cases.map(async (c, i) => (await run(c.variant, refs[i]!).waitFor(/(RESULT|REVIEW|ERROR)(.*)/, PATIENCE_MS))[0]!));

    for (const [i, c] of cases.entries()) {
      const ref = refs[i]!;
      const label = `${c.variant} killed at ${c.fault}`;
      const key = childKey(await storedRoot(db(), ref), 'charge.v1');
      const seen = payments.requestsFor(key);
      const { status, attempts, text } = await inspectCharge(ref);
      const outcomes = attempts.map((a) => a.outcome);
      // Every call was preceded by its attempt's record: started ≥ what the callee saw.
      expect(attempts.length, label).toBeGreaterThanOrEqual(seen);
      // Every successful end is a success the callee answered.
      expect(attempts.filter((a) => a.outcome === 'ok').length, label).toBeLessThanOrEqual(payments.successesFor(key));
      if (c.fault.startsWith('engine.before-call')) {
        // Killed before the call: attempt 1 never reached the callee, and its end was never recorded.
        expect(attempts[0], label).toMatchObject({ attempt: 1, outcome: 'unknown', endedAt: null });
        if (c.variant === 'once') {
          expect(resumed[i], label).toBe('REVIEW');
          expect(seen, label).toBe(0);
        } else {
          expect(resumed[i], label).toMatch(/^RESULT/);
          expect(outcomes, label).toEqual(['unknown', 'ok']);
          expect(seen, label).toBe(1);
          if (c.variant === 'reconcile') expect(attempts[0]!.resolution, label).toBe('absent');
        }
      } else if (c.fault.startsWith('engine.in-call')) {
        // Killed after the callee answered: the callee saw the key once; the ledger knows it may have.
        expect(attempts[0], label).toMatchObject({ attempt: 1, outcome: 'unknown', endedAt: null });
        if (c.variant === 'plain') {
          expect(outcomes, label).toEqual(['unknown', 'ok']);
          expect(seen, label).toBe(2);
        } else if (c.variant === 'reconcile') {
          expect(resumed[i], label).toBe(`RESULT ${JSON.stringify({ paymentId: chargeId(MERCHANT, key) })}`);
          expect(outcomes, label).toEqual(['unknown']);
          expect(attempts[0]!.resolution, label).toBe('reconciled');
          expect(seen, label).toBe(1);
        } else {
          expect(resumed[i], label).toBe('REVIEW');
          expect(status, label).toBe('needs_review');
          expect(outcomes, label).toEqual(['unknown']);
          expect(seen, label).toBe(1);
          expect(text, label).toContain('the callee may have seen this key 1 time');
        }
      } else {
        expect(resumed[i], label).toMatch(/^RESULT/);
        expect(outcomes, label).toEqual(['ok']);
        expect(seen, label).toBe(1);
      }
      const [charges] = await db().sql`select count(*)::int as n from payments.charges where idempotency_key = ${key}`;
      expect(charges!.n, label).toBe(seen > 0 ? 1 : 0);
    }

    // The runs that need review: an operator resolves them; a sweeper (not the CLI) continues them.
    const sweeper = createEngine({ database: db(), workflows: variants.map((v) => callCrash(payments.url, v)), onError: () => {}, logger: false });
    try {
      for (const [i, c] of cases.entries()) {
        if (resumed[i] !== 'REVIEW') continue;
        const ref = refs[i]!;
        const key = childKey(await storedRoot(db(), ref), 'charge.v1');
        const before = payments.requestsFor(key);
        const resolve = c.fault.startsWith('engine.in-call')
          ? ['--output', JSON.stringify({ paymentId: chargeId(MERCHANT, key) })]
          : ['--retry'];
        const bad = await runCli(['resolve', ref.key, '--scope', ref.scope, '--step', 'charge.v1', '--output', '{"paymentId":1}', '--app', app], {
          databaseUrl: db().url,
          env: { CALL_CRASH_PAYMENTS_URL: payments.url },
        });
        expect(bad.code).toBe(1);
        expect(bad.stderr).toMatch(/does not match its schema/);
        const resume = await runCli(['resume', ref.key, '--scope', ref.scope, '--app', app], { databaseUrl: db().url, env: { CALL_CRASH_PAYMENTS_URL: payments.url } });
        expect(resume.code).toBe(1);
        expect(resume.stderr).toContain("needs review at step 'charge.v1'");
        const done = await runCli(['resolve', ref.key, '--scope', ref.scope, '--step', 'charge.v1', ...resolve, '--app', app], {
          databaseUrl: db().url,
          env: { CALL_CRASH_PAYMENTS_URL: payments.url },
        });
        expect(done.code, done.stderr).toBe(0);
        // Resolving changed state only: the run is due, not executed.
        expect((await sweeper.get(ref))?.status).toBe('needs_review');
        await expect.poll(async () => (await sweeper.sweep(), (await sweeper.get(ref))?.status), { interval: 100 }).toBe('completed');
        const info = (await sweeper.get(ref))!;
        expect(JSON.parse(info.output!)).toEqual({ paymentId: chargeId(MERCHANT, key) });
        expect(payments.requestsFor(key) - before, `${c.fault}: calls after resolving`).toBe(c.fault.startsWith('engine.in-call') ? 0 : 1);
      }
    } finally {
      await sweeper.close();
    }
  });
});
