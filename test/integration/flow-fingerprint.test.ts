/**
 * An enqueue's fingerprint: the input as given, the queue and the priority.
 * The volatile fields named in `exclude` are fields of the input, as for
 * engine.start: a retry that changes only them joins the run it enqueued;
 * one that changes anything else is a mismatch, and nothing more is stored.
 * A bad `exclude` is refused as a start's is.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Engine } from '../../src/engine/engine.js';
import { isStepkeyError } from '../../src/errors/stepkey-error.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

const executions = new Map<string, number>();
const order = defineWorkflow({
  name: 'fp-order',
  version: 1,
  input: z.object({ id: z.string(), cents: z.number(), meta: z.object({ sentAt: z.string() }) }),
  steps: { charge: step('fp-charge.v1') },
  async run({ input, steps }) {
    await steps.charge.call(async () => {
      executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
    });
    return { id: input.id };
  },
});
const orders = defineQueue({ name: 'fp-orders', concurrency: 2 });

const engines: Engine[] = [];
const engine = () => {
  const made = testEngine(db(), [order], { queues: [orders] });
  engines.push(made);
  return made;
};
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
});

const codeOf = (call: Promise<unknown>) => call.then(() => 'accepted', (error: unknown) => (isStepkeyError(error) ? error.code : String(error)));

describe("an enqueue's fingerprint", () => {
  it('leaves out the input fields named in exclude: a retry that changes only them joins the run', async () => {
    const e = engine();
    const ref = { scope: 'acme', key: uniqueKey('fp-exclude') };
    const exclude = ['meta.sentAt'];
    const first = await e.enqueue(order, ref, { id: ref.key, cents: 500, meta: { sentAt: '10:00:00' } }, { queue: orders, exclude });
    expect(first.started).toBe(true);
    const retry = await e.enqueue(order, ref, { id: ref.key, cents: 500, meta: { sentAt: '10:00:07' } }, { queue: orders, exclude });
    expect(retry.started).toBe(false);
    expect(await retry.result()).toEqual({ id: ref.key });
    // Another amount is another request under the same key; so is the retry without its exclude.
    expect(await codeOf(e.enqueue(order, ref, { id: ref.key, cents: 900, meta: { sentAt: '10:00:07' } }, { queue: orders, exclude }))).toBe('mismatch');
    expect(await codeOf(e.enqueue(order, ref, { id: ref.key, cents: 500, meta: { sentAt: '10:00:07' } }, { queue: orders }))).toBe('mismatch');
    // The refusal says what an enqueue's fingerprint covers.
    await expect(e.enqueue(order, ref, { id: ref.key, cents: 500, meta: { sentAt: '10:00:00' } }, { queue: orders, priority: 3, exclude })).rejects.toThrow(
      /first used for run 'fp-order' with another input, queue or priority/,
    );
    await waitForRunsToEnd(db().sql, ref.key);
    expect(executions.get(ref.key)).toBe(1);
    expect(await slotsHeld(db().sql, orders.name)).toEqual({ held: 0, entries: 0 });
  });

  it('refuses a bad exclude as a start does, and stores nothing', async () => {
    const e = engine();
    const ref = { scope: 'acme', key: uniqueKey('fp-bad-exclude') };
    const input = { id: ref.key, cents: 500, meta: { sentAt: '10:00:00' } };
    for (const exclude of [[''], [42], 'meta.sentAt']) {
      const enqueued = await codeOf(e.enqueue(order, ref, input, { queue: orders, exclude: exclude as never }));
      const started = await codeOf(e.start(order, { ...ref, key: `${ref.key}-start` }, input, { exclude: exclude as never }));
      expect([enqueued, started]).toEqual(['invalid_options', 'invalid_options']);
    }
    const [row] = await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.ledger where key like ${ref.key + '%'}`;
    expect(row!.n).toBe(0);
  });
});
