/**
 * Child runs: a parent's step starts a child — a run of its own, keyed by the
 * step's key in the parent's scope — and waits for it holding nothing; the
 * child's end wakes the parent; a child that did not complete rejects with a
 * typed ChildRunError; cancelling a parent cancels the child it waits on;
 * startChild returns the child's ref at once.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { RunRef } from '../../src/workflow/handles.js';
import { ChildRunError } from '../../src/workflow/waits/child-error.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { readKeyTree } from '../../src/read/key-tree.js';
import { inspectionJson, renderInspection } from '../../src/cli/inspect-render.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase({ max: 20 });

let shipments = 0;
let release: (() => void) | undefined;
const shipping = defineWorkflow({
  name: 'children-shipping',
  version: 1,
  input: z.object({ order: z.string(), hold: z.boolean().default(false), fail: z.boolean().default(false) }),
  output: z.object({ tracking: z.string(), shippedAt: z.iso.datetime().transform((text) => new Date(text)) }),
  steps: { ship: step('ship.v1') },
  async run({ input, steps }) {
    await steps.ship.call(async () => {
      shipments += 1;
      if (input.hold) await new Promise<void>((resolve) => (release = resolve));
      if (input.fail) throw new NonRetryableError('no carrier for this address');
    });
    return { tracking: `T-${input.order}`, shippedAt: '2026-12-01T12:00:00.000Z' };
  },
});

const checkout = defineWorkflow({
  name: 'children-checkout',
  version: 1,
  input: z.object({ order: z.string(), hold: z.boolean().default(false), fail: z.boolean().default(false) }),
  steps: { ship: step('ship-order.v1'), done: step('done.v1') },
  async run({ input, steps }) {
    try {
      const receipt = await steps.ship.child(shipping, { order: input.order, hold: input.hold, fail: input.fail });
      expectTypeOf(receipt).toEqualTypeOf<{ tracking: string; shippedAt: Date }>();
      await steps.done.call(async () => 'recorded');
      return { tracking: receipt.tracking, at: receipt.shippedAt.toISOString() };
    } catch (error) {
      if (error instanceof ChildRunError) return { failed: error.status, why: error.error.message, child: error.child.key };
      throw error;
    }
  },
});

const fireAndForget = defineWorkflow({
  name: 'children-forget',
  version: 1,
  input: z.object({ order: z.string() }),
  steps: { ship: step('ship-later.v1') },
  async run({ input, steps }) {
    const ref = await steps.ship.startChild(shipping, { order: input.order, hold: true });
    expectTypeOf(ref).toEqualTypeOf<RunRef<typeof shipping>>();
    return { child: ref.key };
  },
});

const status = async (scope: string, key: string) =>
  (await db().sql`select status from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]?.status as string | undefined;

describe('child()', () => {
  it('starts the child under the step’s key, parks the parent, and its end wakes the parent', async () => {
    const engine = testEngine(db(), [checkout, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('parent') };
    const before = shipments;
    const result = await engine.run(checkout, ref, { order: 'o-1' });
    expect(result).toEqual({ tracking: 'T-o-1', at: '2026-12-01T12:00:00.000Z' });
    expect(shipments - before).toBe(1);
    const parent = (await engine.get(ref))!;
    const childStep = parent.steps.find((s) => s.name === 'ship-order.v1')!;
    const child = (await engine.get({ scope: 'acme', key: childRunKey(childStep.key) }))!;
    expect(child).toMatchObject({ workflow: 'children-shipping', status: 'completed', parentRun: ref.key });
    // `stepkey inspect` names the child under its parent, and the parent on the child.
    const parentText = renderInspection(await readKeyTree(db().sql, ref, [checkout, shipping])).join('\n');
    const lines = parentText.split('\n');
    const heading = lines.indexOf('  child runs (1)');
    expect(heading).toBeGreaterThan(0);
    expect(lines[heading + 1]).toMatch(/^  └─ /);
    expect(lines[heading + 1]).toContain(child.key);
    expect(lines[heading + 1]).toContain('children-shipping@1 · completed · 1 attempt');
    const childText = renderInspection(await readKeyTree(db().sql, { scope: 'acme', key: child.key }, [checkout, shipping])).join('\n');
    expect(childText).toContain(`parent     run '${ref.key}' (this run is its child)`);
    const json = inspectionJson(await readKeyTree(db().sql, ref, [checkout, shipping]));
    expect(json[0]!.children).toEqual([expect.objectContaining({ key: child.key, workflow: 'children-shipping', runStatus: 'completed' })]);
    // Replays read the recorded child result; the child is not started again.
    expect(await engine.run(checkout, ref, { order: 'o-1' })).toEqual(result);
    expect(shipments - before).toBe(1);
    await engine.shutdown();
  });

  it('holds nothing while the child runs: the parent is parked on the child, woken when it ends', async () => {
    const engine = testEngine(db(), [checkout, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('held') };
    const handle = await engine.start(checkout, ref, { order: 'o-2', hold: true });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    const info = (await engine.get(ref))!;
    expect(info.wait).toMatchObject({ kind: 'child', step: 'ship-order.v1', until: null });
    expect(await status(ref.scope, info.wait!.for!)).toBe('in_progress');
    expect(engine.activeRuns).toBe(1); // the child, not the parent
    release!();
    await expect(handle.result()).resolves.toMatchObject({ tracking: 'T-o-2' });
    await engine.shutdown();
  });

  it('rejects with a typed ChildRunError when the child did not complete, the same on every replay', async () => {
    const engine = testEngine(db(), [checkout, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('fails') };
    const result = await engine.run(checkout, ref, { order: 'o-3', fail: true });
    expect(result).toMatchObject({ failed: 'errored', why: 'no carrier for this address' });
    expect(await engine.run(checkout, ref, { order: 'o-3', fail: true })).toEqual(result);
    await engine.shutdown();
  });

  it('is cancelled with its parent when the parent is cancelled while waiting on it', async () => {
    const engine = testEngine(db(), [checkout, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('cancel') };
    const handle = await engine.start(checkout, ref, { order: 'o-4', hold: true });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    const childKey = (await engine.get(ref))!.wait!.for!;
    expect(await engine.cancel(ref, 'customer cancelled')).toBe(true);
    expect(await status(ref.scope, childKey)).toBe('cancelled');
    await expect(handle.result()).rejects.toMatchObject({ code: 'run_cancelled' });
    release!();
    await engine.shutdown();
  });

  it('refuses an input the child’s schema rejects, before anything is stored', async () => {
    const bad = defineWorkflow({
      name: 'children-bad',
      version: 1,
      input: z.object({}),
      steps: { ship: step('ship-bad.v1') },
      async run({ steps }) {
        return steps.ship.child(shipping, { order: 7 } as never);
      },
    });
    const engine = testEngine(db(), [bad, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('bad-child') };
    const error = await engine.run(bad, ref, {}).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/the input of child workflow 'children-shipping' is invalid: order:/);
    expect((await engine.get(ref))!.steps).toEqual([]);
    expect(await db().sql`select 1 from stepkey.ledger where scope = 'acme' and parent_run = ${ref.key}`).toHaveLength(0);
    await engine.shutdown();
  });
});

describe('startChild()', () => {
  it('returns the child’s ref at once; the child runs on, and cancelling the parent leaves it be', async () => {
    const engine = testEngine(db(), [fireAndForget, shipping]);
    const ref = { scope: 'acme', key: uniqueKey('forget') };
    const result = await engine.run(fireAndForget, ref, { order: 'o-5' });
    expect(await status(ref.scope, result.child)).toBe('in_progress');
    expect(await engine.run(fireAndForget, ref, { order: 'o-5' })).toEqual(result);
    expect(await engine.cancel(ref)).toBe(false); // the parent has ended
    release!();
    await expect.poll(() => status(ref.scope, result.child)).toBe('completed');
    await engine.shutdown();
  });
});
