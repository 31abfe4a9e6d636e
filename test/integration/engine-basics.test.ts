import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { dateField } from '../../src/workflow/schemas.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { childKey, newRootKey } from '../../src/keys/derive.js';
import { purposeFingerprint } from '../../src/keys/fingerprint.js';
import { connect } from '../../src/db/connect.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
let engine: Engine;
const calls: Record<string, number> = {};
const bump = (name: string) => (calls[name] = (calls[name] ?? 0) + 1);

const order = defineWorkflow({
  name: 'order',
  version: 1,
  input: z.object({ sku: z.string(), quantity: z.number().int().positive() }),
  output: z.object({ orderId: z.number(), paymentId: z.string(), placedAt: dateField() }),
  steps: {
    reserve: step('reserve.v1', { output: z.object({ orderId: z.number() }) }),
    charge: step('charge.v1', { output: z.object({ paymentId: z.string(), at: dateField() }) }),
    note: step('note.v1'),
  },
  async run({ input, steps, ctx }) {
    const placedAt = ctx.now('placed-at');
    const { orderId } = await steps.reserve.tx(async (_db, { sql }) => {
      bump('reserve');
      const [row] = await sql`insert into orders (sku, quantity) values (${input.sku}, ${input.quantity}) returning id`;
      return { orderId: row!.id as number };
    });
    const payment = await steps.charge.call(async ({ key }) => {
      bump('charge');
      return { paymentId: `pay_${key.slice(0, 8)}`, at: new Date('2026-01-01T00:00:00Z') };
    });
    const note = await steps.note.tx(async () => ({ text: 'ok', at: new Date('2026-02-02T00:00:00Z') }));
    expectTypeOf(payment.at).toEqualTypeOf<Date>();
    expectTypeOf(note.at).toEqualTypeOf<string>();
    return { orderId, paymentId: payment.paymentId, placedAt };
  },
});

beforeAll(async () => {
  await db().sql`create table orders (id serial primary key, sku text not null, quantity int not null)`;
  engine = testEngine(db(), [order]);
});
afterAll(() => engine.shutdown());

describe('engine basics', () => {
  it('infers input and result types', () => {
    expectTypeOf(engine.run<typeof order>).parameter(2).toEqualTypeOf<{ sku: string; quantity: number }>();
    expectTypeOf(engine.run<typeof order>).returns.resolves.toEqualTypeOf<{
      orderId: number;
      paymentId: string;
      placedAt: Date;
    }>();
  });

  it('runs the steps once and replays the stored result, Dates included', async () => {
    const ref = { scope: 'acme', key: uniqueKey() };
    const before = { ...calls };
    const first = await engine.run(order, ref, { sku: 'a', quantity: 2 });
    expect(first.placedAt).toBeInstanceOf(Date);
    expect(first.paymentId).toBe(`pay_${childKey(await storedRoot(db(), ref), 'charge.v1').slice(0, 8)}`);
    const again = await engine.run(order, ref, { quantity: 2, sku: 'a' });
    expect(again).toEqual(first);
    expect(calls.reserve! - (before.reserve ?? 0)).toBe(1);
    expect(calls.charge! - (before.charge ?? 0)).toBe(1);
    const info = await engine.get(ref);
    expect(info).toMatchObject({ status: 'completed', workflow: 'order', version: 1, attempts: 1 });
    expect(info!.steps.map((s) => s.name).sort()).toEqual(['$now[placed-at]', 'charge.v1', 'note.v1', 'reserve.v1']);
  });

  it('rejects input that fails its schema before storing anything', async () => {
    const ref = { scope: 'acme', key: uniqueKey() };
    const error = await engine.run(order, ref, { sku: 'a', quantity: -1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StepkeyError);
    expect((error as StepkeyError).code).toBe('invalid_input');
    expect((error as StepkeyError).message).toMatch(/quantity/);
    expect(await engine.get(ref)).toBeUndefined();
  });

  it('answers the same key with another input as a mismatch', async () => {
    const ref = { scope: 'acme', key: uniqueKey() };
    await engine.run(order, ref, { sku: 'a', quantity: 1 });
    const attempt = await engine.attempt(order, ref, { sku: 'b', quantity: 1 });
    expect(attempt).toEqual({ state: 'mismatch', existing: { kind: 'run', name: 'order' } });
    await expect(engine.run(order, ref, { sku: 'b', quantity: 1 })).rejects.toMatchObject({ code: 'mismatch' });
  });

  it('answers a replay, a mismatch and a run in progress with one statement, outside any transaction', async () => {
    const statements: string[] = [];
    const counted = Object.assign(connect(db().url, { max: 2, onStatement: (text) => statements.push(text) }), { name: db().name });
    const counting = testEngine(counted, [order]);
    try {
      const ref = { scope: 'acme', key: uniqueKey('probed') };
      const first = await engine.run(order, ref, { sku: 'a', quantity: 1 });
      statements.length = 0;
      expect(await counting.run(order, ref, { sku: 'a', quantity: 1 })).toEqual(first);
      expect(statements).toHaveLength(1);
      statements.length = 0;
      expect((await counting.attempt(order, ref, { sku: 'b', quantity: 1 })).state).toBe('mismatch');
      expect(statements).toHaveLength(1);

      // A run whose start committed and whose holder is still at work.
      const held = { scope: 'acme', key: uniqueKey('probed-held') };
      const input = { sku: 'a', quantity: 1 };
      await db().sql`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, lease_token, locked_until, version, input, root_key)
        values (${held.scope}, ${held.key}, 'run', 'order', ${purposeFingerprint('order', input)}, 'in_progress', gen_random_uuid(),
                now() + interval '1 minute', 1, ${JSON.stringify(input)}, ${newRootKey(held.scope, held.key)})`;
      statements.length = 0;
      expect(await counting.attempt(order, held, input)).toMatchObject({ state: 'running' });
      expect(statements).toHaveLength(1);
      expect(statements.some((text) => /^\s*(begin|rollback|commit)/i.test(text))).toBe(false);
    } finally {
      await counting.shutdown();
      await counted.close();
    }
  });

  it('never answers a mismatch with the stored outcome, even right after an abandoned claim', async () => {
    // A mismatch's claim rolls back after its answer; a call right behind it may
    // meet that transaction's lock for a moment, and must still get a mismatch.
    for (let i = 0; i < 60; i += 1) {
      const ref = { scope: 'acme', key: uniqueKey('behind') };
      await engine.run(order, ref, { sku: 'a', quantity: 1 });
      expect((await engine.attempt(order, ref, { sku: 'b', quantity: 1 })).state).toBe('mismatch');
      await expect(engine.run(order, ref, { sku: 'b', quantity: 1 })).rejects.toMatchObject({ code: 'mismatch' });
    }
  });

  it('stores a non-retryable error and replays it', async () => {
    let runs = 0;
    const refuse = defineWorkflow({
      name: 'refuse',
      version: 1,
      input: z.object({}),
      steps: { check: step('check.v1') },
      async run({ steps }) {
        await steps.check.tx(async () => {
          runs += 1;
          throw new NonRetryableError('out of stock', { code: 'OUT_OF_STOCK' });
        });
        return 'unreachable';
      },
    });
    const local = testEngine(db(), [refuse]);
    const ref = { scope: 'acme', key: uniqueKey() };
    const first = await local.attempt(refuse, ref, {});
    expect(first).toMatchObject({ state: 'errored', replayed: false, error: { message: 'out of stock', code: 'OUT_OF_STOCK' } });
    const second = await local.attempt(refuse, ref, {});
    expect(second).toMatchObject({ state: 'errored', replayed: true, error: { message: 'out of stock' } });
    expect(runs).toBe(1);
    expect(await local.get(ref)).toMatchObject({ status: 'errored', resumable: false });
    await local.shutdown();
  });
});
