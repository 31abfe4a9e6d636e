/**
 * A key's lifetime and the keys derived from it. A run's step keys derive
 * from a root stored at its claim: a key reused after its retention is a new
 * run whose derived keys are new — a downstream service that remembers keys
 * longer than stepkey never hands the old run's outcome to the new one — and a
 * resumed or taken-over run keeps its own. Rows from before roots were stored
 * keep the root they were derived with.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { childKey, rootKey } from '../../src/keys/derive.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const DAY = 24 * 60 * 60 * 1000;

beforeAll(async () => {
  // A downstream service that remembers idempotency keys for good, as payment providers do.
  await db().sql`create table if not exists lifetime_charges (key text primary key, charge text not null)`;
});

/** Charges once per key; the same key again gets the first charge back. */
async function chargeOnce(key: string): Promise<string> {
  const [row] = await db().sql<{ charge: string }[]>`
    with made as (
      insert into lifetime_charges (key, charge) values (${key}, 'ch_' || substr(md5(random()::text), 1, 10))
      on conflict (key) do nothing returning charge
    )
    select charge from made union all select charge from lifetime_charges where key = ${key} limit 1`;
  return row!.charge;
}

let failing = false;
const order = defineWorkflow({
  name: 'lifetime-order',
  version: 1,
  input: z.object({ amount: z.number() }),
  steps: {
    charge: step('charge.v1', { output: z.object({ charge: z.string() }) }),
    confirm: step('confirm.v1', { retry: { attempts: 1 } }),
  },
  async run({ steps }) {
    const { charge } = await steps.charge.call(async ({ key }) => ({ charge: await chargeOnce(key) }));
    await steps.confirm.call(async () => {
      if (failing) throw new Error('mail server down');
      return 'sent';
    });
    return { charge };
  },
});

describe('a key reused after its retention', () => {
  it('starts a run whose derived keys are new: a second charge, not the first one replayed', async () => {
    const engine = testEngine(db(), [order], { retentionMs: DAY });
    const ref = { scope: 'acme', key: uniqueKey('reused') };
    const first = await engine.run(order, ref, { amount: 5 });
    const firstRoot = await storedRoot(db(), ref);
    // Within the retention: the same outcome, replayed.
    expect(await engine.run(order, ref, { amount: 5 })).toEqual(first);

    engine.clock.advance(DAY + 1_000);
    const second = await engine.run(order, ref, { amount: 5 });
    const secondRoot = await storedRoot(db(), ref);
    expect(secondRoot).not.toBe(firstRoot);
    expect(second.charge).not.toBe(first.charge);
    const charged = await db().sql`select key from lifetime_charges where key in (${childKey(firstRoot, 'charge.v1')}, ${childKey(secondRoot, 'charge.v1')})`;
    expect(charged).toHaveLength(2);
    await engine.shutdown();
  });

  it('enqueues an effect message its consumers have not seen', async () => {
    const record = defineEffect({ name: 'lifetime.record', payload: z.object({ n: z.number() }), handler: async () => {} });
    const ref = { scope: 'acme', key: uniqueKey('effect') };
    const first = await enqueueEffect(db().sql, record, { n: 1 }, { ...ref, retentionMs: DAY });
    expect(await enqueueEffect(db().sql, record, { n: 1 }, { ...ref, retentionMs: DAY })).toEqual({ key: first.key, enqueued: false });
    await db().sql`update stepkey.ledger set expires_at = now() - interval '1 second' where scope = ${ref.scope} and key = ${ref.key}`;
    const again = await enqueueEffect(db().sql, record, { n: 1 }, { ...ref, retentionMs: DAY });
    expect(again.enqueued).toBe(true);
    expect(again.key).not.toBe(first.key);
  });
});

describe('a resumed run', () => {
  afterAll(() => {
    failing = false;
  });

  it('keeps its root: the downstream sees the same key and answers with the same charge', async () => {
    const engine = testEngine(db(), [order]);
    const ref = { scope: 'acme', key: uniqueKey('resumed') };
    failing = true;
    await expect(engine.run(order, ref, { amount: 7 })).rejects.toMatchObject({ code: 'run_failed' });
    const root = await storedRoot(db(), ref);
    const [charged] = await db().sql`select charge from lifetime_charges where key = ${childKey(root, 'charge.v1')}`;
    failing = false;
    expect(await engine.run(order, ref, { amount: 7 })).toEqual({ charge: charged!.charge });
    expect(await storedRoot(db(), ref)).toBe(root);
    await engine.shutdown();
  });

  it('taken over by a sweeper keeps its root', async () => {
    let hold!: () => void;
    const held = new Promise<void>((resolve) => (hold = resolve));
    let calls = 0;
    const slow = defineWorkflow({
      name: 'lifetime-slow',
      version: 1,
      input: z.object({}),
      steps: { first: step('first.v1'), second: step('second.v1') },
      async run({ steps }) {
        await steps.first.call(async () => 'one');
        return steps.second.call(async ({ key }) => {
          calls += 1;
          if (calls === 1) await held;
          return key;
        });
      },
    });
    const holder = testEngine(db(), [slow], { leaseMs: 60_000 });
    const rescuer = testEngine(db(), [slow]);
    const ref = { scope: 'acme', key: uniqueKey('swept') };
    const handle = await holder.start(slow, ref, {});
    await expect.poll(() => calls).toBe(1);
    const root = await storedRoot(db(), ref);
    rescuer.clock.advance(61_000);
    expect(await rescuer.sweep()).toBeGreaterThanOrEqual(1);
    await expect.poll(async () => (await rescuer.get(ref))?.status).toBe('completed');
    expect((await rescuer.get(ref))!.output).toBe(JSON.stringify(childKey(root, 'second.v1')));
    expect(await storedRoot(db(), ref)).toBe(root);
    hold();
    await handle.result().catch(() => undefined);
    await holder.shutdown();
    await rescuer.shutdown();
  });

  it('stored before roots were, keeps the root it was derived with', async () => {
    const engine = testEngine(db(), [order]);
    const ref = { scope: 'acme', key: uniqueKey('legacy') };
    failing = true;
    await expect(engine.run(order, ref, { amount: 9 })).rejects.toMatchObject({ code: 'run_failed' });
    // As a row written before the upgrade: no stored root, its step keyed from the legacy one.
    const legacy = rootKey(ref.scope, ref.key);
    await db().sql`update stepkey.ledger set root_key = null where scope = ${ref.scope} and key = ${ref.key}`;
    await db().sql`update stepkey.steps set key = ${childKey(legacy, 'charge.v1')}
                    where scope = ${ref.scope} and run_key = ${ref.key} and name = 'charge.v1'`;
    failing = false;
    await engine.run(order, ref, { amount: 9 });
    const steps = (await engine.get(ref))!.steps;
    expect(steps.map((s) => [s.name, s.key])).toEqual([
      ['charge.v1', childKey(legacy, 'charge.v1')],
      ['confirm.v1', childKey(legacy, 'confirm.v1')],
    ]);
    expect((await engine.get(ref))!.rootKey).toBe(legacy);
    await engine.shutdown();
  });
});
