/**
 * Cancellation reaches every descendant: cancelling a run cancels its child
 * runs, theirs, … — found by their parent link, so a child started with
 * startChild and a parent still executing are included — each stopped at its
 * next step boundary (a call in flight aborted) or at once if parked, each
 * with an audit row naming the root cancellation. A child cancelled on its
 * own wakes its parent, whose child step gets a typed ChildRunError.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { KeyRef } from '../../src/ledger/types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { ChildRunError } from '../../src/workflow/waits/child-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gates, slotsHeld } from '../helpers/flow.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();

const rows = async (scope: string, keys: string[]) =>
  db().sql<{ key: string; status: string; outcome: string | null }[]>`
    select key, status, outcome from stepkey.ledger where scope = ${scope} and key = any(${keys}::text[]) order by key`;
const childrenOf = async (ref: KeyRef) =>
  (await db().sql<{ key: string }[]>`select key from stepkey.ledger where scope = ${ref.scope} and parent_run = ${ref.key}`).map((r) => r.key);
const statusOf = async (ref: KeyRef) =>
  (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status;

const leaf = defineWorkflow({
  name: 'ct-leaf',
  version: 1,
  input: z.object({}),
  events: { go: z.object({}) },
  steps: { hear: step('hear.v1') },
  async run({ steps }) {
    await steps.hear.waitForEvent('go');
    return 'leaf';
  },
});
const middle = defineWorkflow({
  name: 'ct-middle',
  version: 1,
  input: z.object({}),
  steps: { kid: step('kid.v1') },
  async run({ steps }) {
    return steps.kid.child(leaf, {});
  },
});
const top = defineWorkflow({
  name: 'ct-top',
  version: 1,
  input: z.object({}),
  steps: { kid: step('kid.v1') },
  async run({ steps }) {
    return steps.kid.child(middle, {});
  },
});

const aborted = new Set<string>();
const launcher = defineWorkflow({
  name: 'ct-launcher',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { launch: step('launch.v1'), busy: step('busy.v1', { timeoutMs: LONG_LEASE_MS, retry: { attempts: 1 } }), after: step('after.v1') },
  async run({ input, steps }) {
    await steps.launch.startChild(leaf, {});
    await steps.busy.call(async ({ signal }) => {
      gate(`${input.id}-reached`).open();
      await new Promise((_, reject) =>
        signal.addEventListener('abort', () => {
          aborted.add(input.id);
          reject(signal.reason);
        }),
      );
    });
    await steps.after.tx(async () => 'never');
    return 'done';
  },
});

const patient = defineWorkflow({
  name: 'ct-patient',
  version: 1,
  input: z.object({}),
  steps: { kid: step('kid.v1') },
  async run({ steps }) {
    try {
      return await steps.kid.child(leaf, {});
    } catch (error) {
      if (error instanceof ChildRunError) return `child ${error.status}: ${error.error.message}`;
      throw error;
    }
  },
});

const engineFor = enginesShutAfterEach(db, openAll);

describe('cancelling a run', () => {
  it('cancels its descendants three levels deep, each with an audit row naming the root', async () => {
    const engine = engineFor([top, middle, leaf]);
    const ref = { scope: 'acme', key: uniqueKey('ct-top') };
    await engine.start(top, ref, {});
    let keys: string[] = [];
    await expect
      .poll(
        async () => {
          const [mid] = await childrenOf(ref);
          const [low] = mid ? await childrenOf({ scope: ref.scope, key: mid }) : [];
          keys = [ref.key, mid ?? '', low ?? ''];
          return low ? statusOf({ scope: ref.scope, key: low }) : undefined;
        },
        { timeout: PATIENCE_MS },
      )
      .toBe('waiting');
    expect(await engine.cancel(ref, 'customer left', { actor: 'ops@example.com', source: 'api' })).toBe(true);
    const ended = await rows(ref.scope, keys);
    expect(ended.map((row) => row.status)).toEqual(['cancelled', 'cancelled', 'cancelled']);
    for (const row of ended.filter((r) => r.key !== ref.key)) {
      expect(JSON.parse(row.outcome!)).toMatchObject({ name: 'RunCancelled', data: { root: ref.key } });
    }
    const audit = await db().sql<{ key: string; applied: boolean; detail: string }[]>`
      select key, applied, detail from stepkey.audit_log where scope = ${ref.scope} and action = 'cancel' and key = any(${keys}::text[]) order by id`;
    expect(audit.map((row) => row.key).sort()).toEqual([...keys].sort());
    for (const row of audit.filter((r) => r.key !== ref.key)) expect(JSON.parse(row.detail)).toMatchObject({ root: ref.key, reason: 'customer left' });
    expect(JSON.parse(audit.find((r) => r.key === ref.key)!.detail)).toMatchObject({ children: expect.arrayContaining(keys.slice(1)) });
    // A retry of any of them replays "cancelled"; nothing of them runs again.
    expect(await engine.attempt(top, ref, {})).toMatchObject({ state: 'cancelled', replayed: true });
  });

  it('reaches a child started with startChild, and its parent still executing, whose call is aborted', async () => {
    const engine = engineFor([launcher, leaf]);
    const ref = { scope: 'acme', key: uniqueKey('ct-launch') };
    const attempt = engine.attempt(launcher, ref, { id: ref.key });
    await gate(`${ref.key}-reached`).opened;
    const [kid] = await childrenOf(ref);
    expect(kid).toBeDefined();
    expect(await engine.cancel(ref)).toBe(true);
    expect(await attempt).toMatchObject({ state: 'cancelled' });
    expect(aborted.has(ref.key)).toBe(true);
    expect((await rows(ref.scope, [ref.key, kid!])).map((row) => row.status)).toEqual(['cancelled', 'cancelled']);
    expect((await engine.get(ref))!.steps.map((s) => s.name)).not.toContain('after.v1');
  });

  it('of a child on its own wakes its parent, whose child step gets a typed error', async () => {
    const engine = engineFor([patient, leaf]);
    const ref = { scope: 'acme', key: uniqueKey('ct-patient') };
    const handle = await engine.start(patient, ref, {});
    let kid = '';
    await expect
      .poll(
        async () => {
          kid = (await childrenOf(ref))[0] ?? '';
          return kid ? statusOf({ scope: ref.scope, key: kid }) : undefined;
        },
        { timeout: PATIENCE_MS },
      )
      .toBe('waiting');
    await expect.poll(() => statusOf(ref), { timeout: PATIENCE_MS }).toBe('waiting');
    expect(await engine.cancel({ scope: ref.scope, key: kid }, 'not needed')).toBe(true);
    expect(await handle.result()).toBe('child cancelled: not needed');
    expect(await statusOf(ref)).toBe('completed');
  });

  it('reaches a child on a queue: waiting for a slot, its entry goes; holding one, its call is aborted and the slot goes to the next in line', async () => {
    const line = defineQueue({ name: 'ct-line', concurrency: 1 });
    const work = defineWorkflow({
      name: 'ct-queued-work',
      version: 1,
      input: z.object({ id: z.string() }),
      steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS, retry: { attempts: 1 } }) },
      async run({ input, steps }) {
        await steps.work.call(async ({ signal }) => {
          gate(`${input.id}-working`).open();
          await Promise.race([
            gate(input.id).opened,
            new Promise((_, reject) =>
              signal.addEventListener('abort', () => {
                aborted.add(input.id);
                reject(signal.reason);
              }),
            ),
          ]);
        });
        return input.id;
      },
    });
    const owner = defineWorkflow({
      name: 'ct-queued-owner',
      version: 1,
      input: z.object({ id: z.string() }),
      steps: { kid: step('kid.v1') },
      async run({ input, steps }) {
        return steps.kid.child(work, { id: `${input.id}-child` }, { queue: line });
      },
    });
    const engine = engineFor([owner, work], { queues: [line] });

    // Waiting for a slot: the queue's one slot is held by an enqueued run.
    const holder = { scope: 'acme', key: uniqueKey('ct-qholder') };
    await engine.enqueue(work, holder, { id: holder.key }, { queue: line });
    await gate(`${holder.key}-working`).opened;
    const waiting = { scope: 'acme', key: uniqueKey('ct-qwaiting') };
    await engine.start(owner, waiting, { id: waiting.key });
    await expect.poll(() => statusOf(waiting), { timeout: PATIENCE_MS }).toBe('waiting');
    const [queuedChild] = await childrenOf(waiting);
    expect(await statusOf({ scope: 'acme', key: queuedChild! })).toBe('waiting');
    expect(await slotsHeld(db().sql, 'ct-line')).toEqual({ held: 1, entries: 2 });
    expect(await engine.cancel(waiting, 'not needed')).toBe(true);
    expect((await rows('acme', [waiting.key, queuedChild!])).map((row) => row.status)).toEqual(['cancelled', 'cancelled']);
    expect(await slotsHeld(db().sql, 'ct-line')).toEqual({ held: 1, entries: 1 });

    // Holding the slot: the holder ends, the next parent's child gets the slot and works in it.
    const running = { scope: 'acme', key: uniqueKey('ct-qrunning') };
    await engine.start(owner, running, { id: running.key });
    await expect.poll(async () => (await childrenOf(running)).length, { timeout: PATIENCE_MS }).toBe(1);
    const [runningChild] = await childrenOf(running);
    const next = { scope: 'acme', key: uniqueKey('ct-qnext') };
    await engine.enqueue(work, next, { id: next.key }, { queue: line });
    gate(holder.key).open();
    await gate(`${running.key}-child-working`).opened;
    expect(await slotsHeld(db().sql, 'ct-line')).toEqual({ held: 1, entries: 2 });
    expect(await statusOf(next)).toBe('waiting');
    expect(await engine.cancel(running, 'not needed')).toBe(true);
    await expect.poll(() => statusOf({ scope: 'acme', key: runningChild! }), { timeout: PATIENCE_MS }).toBe('cancelled');
    expect(aborted.has(`${running.key}-child`)).toBe(true);
    // The slot it gave back went to the run next in line.
    await gate(`${next.key}-working`).opened;
    expect(await slotsHeld(db().sql, 'ct-line')).toEqual({ held: 1, entries: 1 });
    gate(next.key).open();
    await expect.poll(() => statusOf(next), { timeout: PATIENCE_MS }).toBe('completed');
    expect(await slotsHeld(db().sql, 'ct-line')).toEqual({ held: 0, entries: 0 });
  });
});
