import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { childKey } from '../../src/keys/derive.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { charge } from '../../workflows/payments/client.js';
import { chargeId, startPaymentService, type PaymentService } from '../../workflows/payments/service.js';
import { useTestDatabase } from '../helpers/database.js';
import { effectsTable } from '../helpers/effects-table.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
let payments: PaymentService;

const { create, effectCount, record } = effectsTable(db);

beforeAll(async () => {
  await create();
  payments = await startPaymentService({ database: db() });
});
afterAll(() => payments.close());

describe('tenants', () => {
  it('keeps two tenants with the same key apart: two runs, two derived keys, two charges', async () => {
    const shop = defineWorkflow({
      name: 'tenant-shop',
      version: 1,
      input: z.object({ cents: z.number() }),
      steps: { pay: step('pay.v1', { output: z.object({ id: z.string() }) }) },
      async run({ input, steps, ctx }) {
        return steps.pay.call(async ({ key, signal }) => {
          const made = await charge(payments.url, 'tenant-test', { amountCents: input.cents, currency: 'EUR', reference: ctx.rootKey }, { idempotencyKey: key, signal });
          return { id: made.id };
        });
      },
    });
    const engine = testEngine(db(), [shop]);
    const key = uniqueKey('same');
    const [a, b] = await Promise.all([
      engine.run(shop, { scope: 'tenant-a', key }, { cents: 500 }),
      engine.run(shop, { scope: 'tenant-b', key }, { cents: 500 }),
    ]);
    const keyA = childKey(await storedRoot(db(), { scope: 'tenant-a', key }), 'pay.v1');
    const keyB = childKey(await storedRoot(db(), { scope: 'tenant-b', key }), 'pay.v1');
    expect(keyA).not.toBe(keyB);
    expect(a.id).toBe(chargeId('tenant-test', keyA));
    expect(b.id).toBe(chargeId('tenant-test', keyB));
    const rows = await db().sql`select count(*)::int as n from payments.charges where id in (${a.id}, ${b.id})`;
    expect(rows[0]!.n).toBe(2);
    await engine.shutdown();
  });
});

describe('versions', () => {
  let failSecondStep = true;
  const v1 = defineWorkflow({
    name: 'versioned',
    version: 1,
    input: z.object({ n: z.number() }),
    steps: { first: step('first.v1'), second: step('second.v1', { retry: { attempts: 1 } }) },
    async run({ steps }) {
      await steps.first.tx(record('first.v1'));
      await steps.second.tx(async (db, context) => {
        if (failSecondStep) throw new Error('downstream unavailable');
        await record('second.v1')(db, context);
      });
      return 'v1';
    },
  });
  const v2 = defineWorkflow({
    name: 'versioned',
    version: 2,
    input: z.object({ n: z.number() }),
    steps: { first: step('first.v2'), second: step('second.v2') },
    async run({ steps }) {
      await steps.first.tx(record('first.v2'));
      await steps.second.tx(record('second.v2'));
      return 'v2';
    },
  });

  it('resumes a run under the version that started it', async () => {
    const ref = { scope: 'acme', key: uniqueKey('v') };
    const old = testEngine(db(), [v1]);
    await expect(old.run(v1, ref, { n: 1 })).rejects.toMatchObject({ code: 'run_failed', retryable: true });
    expect(await old.get(ref)).toMatchObject({ status: 'failed', resumable: true, version: 1 });
    await old.shutdown();

    failSecondStep = false;
    const deployed = testEngine(db(), [v1, v2]);
    // The caller now holds v2; the run keeps its own version: not a mismatch, and v1's steps.
    expect(await deployed.run(v2, ref, { n: 1 })).toBe('v1');
    const info = await deployed.get(ref);
    expect(info!.steps.map((s) => s.name).sort()).toEqual(['first.v1', 'second.v1']);
    const root = await storedRoot(db(), ref);
    expect(await effectCount(childKey(root, 'first.v1'))).toBe(1);
    await deployed.shutdown();
  });

  it('fails a run whose version is no longer registered, naming that version', async () => {
    failSecondStep = true;
    const ref = { scope: 'acme', key: uniqueKey('gone') };
    const old = testEngine(db(), [v1]);
    await expect(old.run(v1, ref, { n: 1 })).rejects.toMatchObject({ code: 'run_failed' });
    await old.shutdown();

    const onlyV2 = testEngine(db(), [v2]);
    const error = await onlyV2.run(v2, ref, { n: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StepkeyError);
    expect((error as StepkeyError).message).toMatch(/workflow 'versioned' version 1, which this process does not register \(registered: 2\)/);
    expect(await onlyV2.get(ref)).toMatchObject({ status: 'failed', resumable: true });
    await onlyV2.shutdown();
  });
});

describe('determinism and repeated steps', () => {
  it('replays ctx.now() and ctx.uuid() after a resume', async () => {
    let fail = true;
    const seen: { at: string; id: string }[] = [];
    const clocked = defineWorkflow({
      name: 'clocked',
      version: 1,
      input: z.object({}),
      steps: { later: step('later.v1', { retry: { attempts: 1 } }) },
      async run({ steps, ctx }) {
        const at = ctx.now('placed-at').toISOString();
        const id = ctx.uuid('order-id');
        seen.push({ at, id });
        await steps.later.tx(async () => {
          if (fail) throw new Error('not yet');
        });
        return { at, id };
      },
    });
    const engine = testEngine(db(), [clocked]);
    const ref = { scope: 'acme', key: uniqueKey('clock') };
    await expect(engine.run(clocked, ref, {})).rejects.toMatchObject({ code: 'run_failed' });
    fail = false;
    await sleep(5);
    const result = await engine.run(clocked, ref, {});
    expect(seen).toHaveLength(2);
    expect(seen[1]).toEqual(seen[0]);
    expect(result).toEqual(seen[0]);
    await engine.shutdown();
  });

  it('runs a step per item with stable ids, and refuses the same id twice', async () => {
    const loop = defineWorkflow({
      name: 'loop',
      version: 1,
      input: z.object({ skus: z.array(z.string()) }),
      steps: { reserve: step('reserve-item.v1') },
      async run({ input, steps }) {
        for (const sku of input.skus) await steps.reserve.tx(record(`reserve:${sku}`), { id: sku });
        return input.skus.length;
      },
    });
    const engine = testEngine(db(), [loop]);
    const ref = { scope: 'acme', key: uniqueKey('loop') };
    expect(await engine.run(loop, ref, { skus: ['a', 'b', 'c'] })).toBe(3);
    const root = await storedRoot(db(), ref);
    expect(await effectCount(childKey(root, 'reserve-item.v1[b]'))).toBe(1);

    const twice = { scope: 'acme', key: uniqueKey('twice') };
    const error = (await engine.run(loop, twice, { skus: ['a', 'a'] }).catch((e: unknown) => e)) as StepkeyError;
    expect(error.message).toMatch(/Step 'reserve-item.v1\[a\]' ran twice in one run/);
    await engine.shutdown();
  });

  it('refuses a reused ctx.now label', async () => {
    const twice = defineWorkflow({
      name: 'now-twice',
      version: 1,
      input: z.object({}),
      steps: {},
      async run({ ctx }) {
        ctx.now();
        ctx.now();
        return 1;
      },
    });
    const engine = testEngine(db(), [twice]);
    const error = (await engine.run(twice, { scope: 'acme', key: uniqueKey() }, {}).catch((e: unknown) => e)) as StepkeyError;
    expect(error.message).toMatch(/ctx.now\('now'\) was used twice in one run; give each use its own label/);
    await engine.shutdown();
  });
});

describe('takeover', () => {
  it('fences out a holder whose lease was taken over: its step cannot commit', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let first = true;
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const stuck = defineWorkflow({
      name: 'stuck',
      version: 1,
      input: z.object({}),
      steps: { work: step('work.v1') },
      async run({ steps }) {
        await steps.work.tx(async (db, context) => {
          await record('work.v1')(db, context);
          if (first) {
            first = false;
            holding();
            await gate;
          }
        });
        return 'done';
      },
    });
    const holder = testEngine(db(), [stuck], { leaseMs: 60_000 });
    const ref = { scope: 'acme', key: uniqueKey('stuck') };
    const handle = await holder.start(stuck, ref, {});
    // The holder is inside its step (holding the gate) when its lease is taken over.
    await held;

    const rescuer = testEngine(db(), [stuck], { leaseMs: 60_000 });
    rescuer.clock.advance(61_000);
    expect(await rescuer.sweep()).toBeGreaterThanOrEqual(1);
    await expect.poll(async () => (await rescuer.get(ref))?.status).toBe('completed');
    release();
    await expect(handle.result()).resolves.toBe('done');
    expect(await effectCount(childKey(handle.rootKey!, 'work.v1'))).toBe(1);
    await holder.shutdown();
    await rescuer.shutdown();
  });
});

describe('bad definitions and calls', () => {
  it('refuses invalid or duplicate step names and bad versions at definition time', () => {
    expect(() => step('charge card')).toThrow(/letters, digits/);
    expect(() =>
      defineWorkflow({ name: 'dup', version: 1, input: z.object({}), steps: { a: step('x.v1'), b: step('x.v1') }, run: async () => 1 }),
    ).toThrow(/steps.a and steps.b share the step name 'x.v1'/);
    expect(() => defineWorkflow({ name: 'bad', version: 0, input: z.object({}), steps: {}, run: async () => 1 })).toThrow(
      /version must be a positive whole number/,
    );
    expect(() => defineWorkflow({ name: 'bad name', version: 1, input: z.object({}), steps: {}, run: async () => 1 })).toThrow(
      /the name must be/,
    );
    expect(() => step('x.v1', { retry: { attempts: 0 } })).toThrow(/retry.attempts must be a number ≥ 1/);
  });

  it('refuses a workflow that is not registered, and a bad key', async () => {
    const stray = defineWorkflow({ name: 'stray', version: 1, input: z.object({}), steps: {}, run: async () => 1 });
    const engine = testEngine(db(), []);
    await expect(engine.run(stray, { scope: 'acme', key: 'k' }, {})).rejects.toMatchObject({
      code: 'workflow_not_found',
      message: expect.stringMatching(/'stray' version 1 is not registered/),
    });
    await expect(engine.run(stray, { scope: 'acme', key: '' }, {})).rejects.toMatchObject({ code: 'invalid_key' });
    await expect(engine.get({ scope: '', key: 'k' })).rejects.toMatchObject({ code: 'invalid_scope' });
    await engine.shutdown();
  });

  it('stores a non-retryable error thrown from a call step and throws it again on replay', async () => {
    let calls = 0;
    const refused = defineWorkflow({
      name: 'refused',
      version: 1,
      input: z.object({}),
      steps: { pay: step('pay.v1') },
      async run({ steps }) {
        try {
          await steps.pay.call(async () => {
            calls += 1;
            throw new NonRetryableError('card declined', { code: 'DECLINED' });
          });
        } catch (error) {
          return { declined: (error as NonRetryableError).code };
        }
        return { declined: null };
      },
    });
    const engine = testEngine(db(), [refused]);
    const ref = { scope: 'acme', key: uniqueKey('declined') };
    expect(await engine.run(refused, ref, {})).toEqual({ declined: 'DECLINED' });
    expect(calls).toBe(1);
    await engine.shutdown();
  });
});
