/**
 * A child run on a queue: `steps.x.child(workflow, input, { queue })` puts the
 * child in line in the parent's step transaction and parks it for a slot; only
 * the queue's dispatch starts it, so the queue's concurrency — whole and per
 * partition — counts children exactly as runs enqueued by the engine, and the
 * child's end gives its slot to the next in line and wakes its parent.
 * Bad options are refused naming the step, before anything is stored.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { createIntervals, gates, maxOverlap, readIntervals, recordEnd, recordStart, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 20 });
const { gate, openAll } = gates();

beforeAll(async () => createIntervals(db().sql));

const engineFor = enginesShutAfterEach(db, openAll);

const status = async (ref: KeyRef) =>
  (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status;
const childOf = async (ref: KeyRef) =>
  (
    await db().sql<{ key: string; status: string; wait_kind: string | null; wait_for: string | null }[]>`
      select key, status, wait_kind, wait_for from stepkey.ledger where scope = ${ref.scope} and parent_run = ${ref.key}`
  )[0];

const reports = defineQueue<{ tenant: string }>({
  name: 'qc-reports',
  concurrency: 2,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 1 },
});

const render = defineWorkflow({
  name: 'qc-render',
  version: 1,
  input: z.object({ tenant: z.string(), id: z.string(), hold: z.boolean().default(false) }),
  output: z.object({ pages: z.number() }),
  steps: { render: step('render.v1', { timeoutMs: LONG_LEASE_MS }) },
  async run({ input, steps }) {
    await steps.render.call(async () => {
      const id = await recordStart(db().sql, `qc-${input.id}`, input.tenant);
      if (input.hold) await gate(input.id).opened;
      else await new Promise((resolve) => setTimeout(resolve, 20));
      await recordEnd(db().sql, id);
    });
    return { pages: input.id.length };
  },
});

const month = defineWorkflow({
  name: 'qc-month',
  version: 1,
  input: z.object({ tenant: z.string(), id: z.string(), hold: z.boolean().default(false) }),
  steps: { report: step('report.v1'), after: step('after.v1') },
  async run({ input, steps }) {
    const rendered = await steps.report.child(render, input, { queue: reports });
    await steps.after.tx(async () => 'filed');
    return { pages: rendered.pages };
  },
});

let afterFails = true;
const flakyMonth = defineWorkflow({
  name: 'qc-flaky-month',
  version: 1,
  input: z.object({ tenant: z.string(), id: z.string() }),
  steps: { report: step('report.v1'), after: step('after.v1', { retry: { attempts: 1 } }) },
  async run({ input, steps }) {
    const rendered = await steps.report.child(render, input, { queue: reports });
    await steps.after.tx(async () => {
      if (afterFails) throw new Error('filing is down');
      return 'filed';
    });
    return { pages: rendered.pages };
  },
});

describe('a child on a queue', () => {
  it('waits in line for a slot, parked, with its parent parked on it; a slot given back starts it, and its end wakes the parent', async () => {
    const engine = engineFor([month, render], { queues: [reports] });
    // Tenant t1's slot is held by a run enqueued by the engine.
    const holder = { scope: 'acme', key: uniqueKey('qc-holder') };
    await engine.enqueue(render, holder, { tenant: 't1', id: holder.key, hold: true }, { queue: reports });
    await expect.poll(() => status(holder)).toBe('in_progress');

    const parent = { scope: 'acme', key: uniqueKey('qc-parent') };
    const handle = await engine.start(month, parent, { tenant: 't1', id: parent.key });
    await expect.poll(() => status(parent)).toBe('waiting');
    const child = (await childOf(parent))!;
    expect(child).toMatchObject({ status: 'waiting', wait_kind: 'slot', wait_for: 'qc-reports' });
    expect(await slotsHeld(db().sql, 'qc-reports')).toEqual({ held: 1, entries: 2 });
    const info = await engine.get({ scope: 'acme', key: child.key });
    expect(info).toMatchObject({ status: 'waiting', parentRun: parent.key, queue: { queue: 'qc-reports', partition: 't1', holding: false } });
    // A sweep does not start it: only the queue's dispatch does, and t1 has no free slot.
    await engine.sweep();
    expect((await childOf(parent))!.status).toBe('waiting');

    gate(holder.key).open();
    expect(await handle.result()).toEqual({ pages: parent.key.length });
    expect(await status({ scope: 'acme', key: child.key })).toBe('completed');
    expect(await slotsHeld(db().sql, 'qc-reports')).toEqual({ held: 0, entries: 0 });
  });

  it('keeps the queue’s concurrency exact — whole and per partition — for children and enqueued runs together', async () => {
    const engine = engineFor([month, render], { queues: [reports], maxConcurrentRuns: 16 });
    const prefix = uniqueKey('qc-many');
    const tenants = ['a', 'b', 'c'];
    const parents = Array.from({ length: 9 }, (_, i) => ({ scope: 'acme', key: `${prefix}-p${i}`, tenant: tenants[i % 3]! }));
    const direct = Array.from({ length: 6 }, (_, i) => ({ scope: 'acme', key: `${prefix}-d${i}`, tenant: tenants[i % 3]! }));
    const handles = await Promise.all([
      ...parents.map((p) => engine.start(month, p, { tenant: p.tenant, id: p.key })),
      ...direct.map((d) => engine.enqueue(render, d, { tenant: d.tenant, id: d.key }, { queue: reports })),
    ]);
    await Promise.all(handles.map((h) => h.result()));
    await waitForRunsToEnd(db().sql, prefix);
    const intervals = await readIntervals(db().sql, `qc-${prefix}`);
    // Every child and every enqueued run rendered once.
    expect(new Set(intervals.map((i) => i.run)).size).toBe(15);
    expect(intervals.length).toBe(15);
    const overlap = maxOverlap(intervals);
    expect(overlap.overall).toBeLessThanOrEqual(2);
    expect(overlap.perTenant).toBeLessThanOrEqual(1);
    expect(await slotsHeld(db().sql, 'qc-reports')).toEqual({ held: 0, entries: 0 });
    const children = await db().sql<{ n: number }[]>`
      select count(*)::int as n from stepkey.ledger where scope = 'acme' and parent_run like ${prefix + '%'} and status = 'completed'`;
    expect(children[0]!.n).toBe(9);
  });

  it('starts at once in a process that may execute one run at a time: the parent that parks for it frees its place', async () => {
    const engine = engineFor([month, render], { queues: [reports], maxConcurrentRuns: 1 });
    const parent = { scope: 'acme', key: uniqueKey('qc-single') };
    // No sweep runs here: the child starts from the dispatch after the parent's step, and its end wakes the parent.
    expect(await engine.run(month, parent, { tenant: 't9', id: parent.key })).toEqual({ pages: parent.key.length });
  });

  it('fanned out from a process with no room left, start there one at a time (over its room by one run per queue, never by the queue’s width)', async () => {
    const wide = defineQueue({ name: uniqueKey('qc-wide'), concurrency: 6 });
    const names = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5'] as const;
    const executing = new Set<string>();
    const finished = new Set<string>();
    let most = 0;
    const child = defineWorkflow({
      name: 'qc-fan-child',
      version: 1,
      input: z.object({ id: z.string() }),
      steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS }) },
      async run({ input, steps }) {
        await steps.work.call(async () => {
          executing.add(input.id);
          most = Math.max(most, executing.size);
          await gate(input.id).opened;
          executing.delete(input.id);
          finished.add(input.id);
        });
      },
    });
    const fanOut = defineWorkflow({
      name: 'qc-fan-out',
      version: 1,
      input: z.object({ id: z.string() }),
      steps: { ...Object.fromEntries(names.map((name) => [name, step(`${name}.v1`)])), hold: step('hold.v1', { timeoutMs: LONG_LEASE_MS }) } as Record<
        (typeof names)[number] | 'hold',
        ReturnType<typeof step>
      >,
      async run({ input, steps }) {
        for (const name of names) await steps[name].startChild(child, { id: `${input.id}-${name}` }, { queue: wide.name });
        // The parent keeps this process's one run of room until the test lets it go.
        await steps.hold.call(() => gate(input.id).opened);
      },
    });
    const engine = engineFor([fanOut, child], { queues: [wide], maxConcurrentRuns: 1, sweepIntervalMs: 3_600_000 });
    const parent = { scope: 'acme', key: uniqueKey('qc-fan') };
    const running = await engine.start(fanOut, parent, { id: parent.key });
    // Each child's entry is added without the queue's lock: this process owes the queue its dispatches,
    // and starts the children itself, no sweep; as one ends, the next starts.
    while (finished.size < names.length) {
      await expect.poll(() => executing.size, { timeout: PATIENCE_MS }).toBeGreaterThan(0);
      // A moment for any further start to show before the ones executing are let go.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const letGo = [...executing];
      for (const id of letGo) gate(id).open();
      await expect.poll(() => letGo.every((id) => finished.has(id)), { timeout: PATIENCE_MS }).toBe(true);
    }
    gate(parent.key).open();
    await running.result();
    expect(most).toBe(1);
    // The last child's end commits after its step: every slot given back, every entry gone.
    await expect.poll(() => slotsHeld(db().sql, wide.name), { timeout: PATIENCE_MS }).toEqual({ held: 0, entries: 0 });
  });

  it('startChild on a queue returns the child’s ref at once; the child starts when the queue has a slot', async () => {
    const launcher = defineWorkflow({
      name: 'qc-launcher',
      version: 1,
      input: z.object({ tenant: z.string(), id: z.string() }),
      steps: { launch: step('launch.v1') },
      async run({ input, steps }) {
        const ref = await steps.launch.startChild(render, { tenant: input.tenant, id: input.id }, { queue: 'qc-reports', priority: 5 });
        return ref.key;
      },
    });
    const engine = engineFor([launcher, render], { queues: [reports] });
    const holder = { scope: 'acme', key: uniqueKey('qc-sholder') };
    await engine.enqueue(render, holder, { tenant: 't2', id: holder.key, hold: true }, { queue: reports });
    await expect.poll(() => status(holder)).toBe('in_progress');
    const parent = { scope: 'acme', key: uniqueKey('qc-launch') };
    const childKey = await engine.run(launcher, parent, { tenant: 't2', id: parent.key });
    const child = { scope: 'acme', key: childKey };
    expect(await engine.get(child)).toMatchObject({ status: 'waiting', queue: { queue: 'qc-reports', priority: 5, holding: false } });
    gate(holder.key).open();
    await expect.poll(() => status(child), { timeout: PATIENCE_MS }).toBe('completed');
  });

  it('refuses bad options naming the step, and stores no child', async () => {
    const bad = (options: unknown) =>
      defineWorkflow({
        name: `qc-bad-${uniqueKey('wf')}`,
        version: 1,
        input: z.object({}),
        steps: { kid: step('kid.v1') },
        async run({ steps }) {
          return steps.kid.child(render, { tenant: 't', id: 'x' }, options as never);
        },
      });
    const cases: [unknown, RegExp, string][] = [
      [{ queue: 'nope' }, /Step 'kid.v1': Queue 'nope' is not registered with this engine \(registered: qc-reports\)/, 'invalid_options'],
      [{ queue: reports, priority: 5000 }, /Step 'kid.v1': .*priority must be a whole number from -1000 to 1000, got 5000/, 'invalid_options'],
      [{ priority: 1 }, /Step 'kid.v1': priority 1 needs a queue/, 'invalid_options'],
    ];
    for (const [options, message, code] of cases) {
      const wf = bad(options);
      const engine = engineFor([wf, render], { queues: [reports] });
      const ref = { scope: 'acme', key: uniqueKey('qc-bad') };
      // The step's error ends the run; its stored error keeps the code and message.
      const error = await engine.run(wf, ref, {}).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(message);
      expect((await engine.get(ref))!.error).toMatchObject({ code });
      expect(await childOf(ref)).toBeUndefined();
    }
    const wf = bad({ queue: reports });
    const noQueues = engineFor([wf, render]);
    const ref = { scope: 'acme', key: uniqueKey('qc-noqueues') };
    const error = await noQueues.run(wf, ref, {}).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/Step 'kid.v1': queue 'qc-reports' is not registered with this engine \(registered: none\)/);
    expect(await childOf(ref)).toBeUndefined();
  });

  it('replays its finished child step in a process that does not register the queue: the resumed parent completes', async () => {
    const withQueue = engineFor([flakyMonth, render], { queues: [reports] });
    const parent = { scope: 'acme', key: uniqueKey('qc-replay') };
    afterFails = true;
    await expect(withQueue.run(flakyMonth, parent, { tenant: 'r', id: parent.key })).rejects.toThrow(/filing is down/);
    expect(await status(parent)).toBe('failed');
    afterFails = false;
    // Resumed where the queue is not registered: the child step replays from its record.
    const without = engineFor([flakyMonth, render]);
    expect(await without.run(flakyMonth, parent, { tenant: 'r', id: parent.key })).toEqual({ pages: parent.key.length });
  });
});
