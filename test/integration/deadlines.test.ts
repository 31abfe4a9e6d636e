/**
 * Deadlines: a run unfinished at its deadline ends deadline_exceeded — final,
 * its outcome stored — wherever it is: executing (at its next step boundary,
 * a call in flight aborted through its signal) or parked on anything (a
 * timer, an event, a child, a queue slot, a limit, a review), where the sweep
 * ends it in SQL, for a run of any version. Its descendants are cancelled
 * with it and what it holds is given back. Time passes by moving the clock.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gates, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { limitHeld } from '../helpers/limits.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const MINUTE = 60_000;

const status = async (ref: KeyRef) =>
  (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status;

const engineFor = enginesShutAfterEach(db, openAll);

/** A workflow whose one call waits at the gate named by its input's id. */
const gatedWork = (name: string) =>
  defineWorkflow({
    name,
    version: 1,
    input: z.object({ id: z.string() }),
    steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS }) },
    async run({ input, steps }) {
      await steps.work.call(async () => gate(input.id).opened);
      return input.id;
    },
  });

/** Moves the engine's clock past the deadline and sweeps until the run has ended at it. */
async function pastDeadline(engine: Engine, ref: KeyRef, byMs = MINUTE + 1_000) {
  engine.clock.advance(byMs);
  await expect
    .poll(async () => {
      await engine.sweep();
      return status(ref);
    }, { timeout: PATIENCE_MS, interval: 100 })
    .toBe('deadline_exceeded');
}

const sleeper = defineWorkflow({
  name: 'dl-sleeper',
  version: 1,
  input: z.object({}),
  deadline: MINUTE,
  steps: { nap: step('nap.v1'), after: step('after.v1') },
  async run({ steps }) {
    await steps.nap.sleep(60 * MINUTE);
    await steps.after.tx(async () => 'late');
    return 'woke';
  },
});

const listener = defineWorkflow({
  name: 'dl-listener',
  version: 1,
  input: z.object({}),
  events: { go: z.object({}) },
  steps: { hear: step('hear.v1') },
  async run({ steps }) {
    await steps.hear.waitForEvent('go');
    return 'heard';
  },
});

const calls = { aborted: 0, reached: new Map<string, () => void>() };
const caller = defineWorkflow({
  name: 'dl-caller',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { slow: step('slow.v1', { timeoutMs: LONG_LEASE_MS, retry: { attempts: 1 } }), after: step('after.v1') },
  async run({ input, steps }) {
    await steps.slow.call(async ({ signal }) => {
      calls.reached.get(input.id)?.();
      await new Promise((_, reject) =>
        signal.addEventListener('abort', () => {
          calls.aborted += 1;
          reject(signal.reason);
        }),
      );
    });
    await steps.after.tx(async () => 'never');
    return 'done';
  },
});

describe('a run past its deadline', () => {
  it('ends deadline_exceeded while executing: its call in flight is aborted, nothing after it runs', async () => {
    const engine = engineFor([caller]);
    const ref = { scope: 'acme', key: uniqueKey('dl-exec') };
    const reached = new Promise<void>((resolve) => calls.reached.set(ref.key, resolve));
    const before = calls.aborted;
    const attempt = engine.attempt(caller, ref, { id: ref.key }, { deadline: MINUTE });
    await reached;
    engine.clock.advance(MINUTE + 1_000);
    const answer = await attempt;
    expect(answer).toMatchObject({ state: 'deadline_exceeded', replayed: false, reason: { name: 'DeadlineExceeded' } });
    expect(calls.aborted).toBe(before + 1);
    expect(await status(ref)).toBe('deadline_exceeded');
    const info = await engine.get(ref);
    expect(info).toMatchObject({ status: 'deadline_exceeded', resumable: false });
    expect(info!.steps.map((s) => s.name)).not.toContain('after.v1');
    // A replay answers the same, marked replayed; a resume refuses it.
    expect(await engine.attempt(caller, ref, { id: ref.key })).toMatchObject({ state: 'deadline_exceeded', replayed: true });
    expect(await engine.resume(ref)).toMatchObject({ state: 'deadline_exceeded', replayed: true });
    await expect(engine.run(caller, ref, { id: ref.key })).rejects.toMatchObject({ code: 'run_deadline_exceeded' });
  });

  it('parked on a timer: the sweep ends it, and its sleep never completes', async () => {
    const engine = engineFor([sleeper]);
    const ref = { scope: 'acme', key: uniqueKey('dl-timer') };
    expect(await engine.attempt(sleeper, ref, {})).toMatchObject({ state: 'waiting', wait: { kind: 'timer' } });
    await pastDeadline(engine, ref);
    expect((await engine.get(ref))!.steps.map((s) => s.name)).toEqual([]);
  });

  it('parked on an event: the sweep ends it, and a later send is refused', async () => {
    const engine = engineFor([listener]);
    const ref = { scope: 'acme', key: uniqueKey('dl-event') };
    const handle = await engine.start(listener, ref, {}, { deadline: new Date(Date.now() + MINUTE) });
    await expect.poll(() => status(ref), { timeout: PATIENCE_MS }).toBe('waiting');
    await pastDeadline(engine, ref, 2 * MINUTE);
    await expect(engine.send(handle, 'go', {}, { key: 'late' })).rejects.toMatchObject({ code: 'run_ended' });
    await expect(handle.result()).rejects.toMatchObject({ code: 'run_deadline_exceeded' });
  });

  it('parked on a child: the sweep ends it and cancels the child, naming it', async () => {
    const parent = defineWorkflow({
      name: 'dl-parent',
      version: 1,
      input: z.object({}),
      deadline: MINUTE,
      steps: { kid: step('kid.v1') },
      async run({ steps }) {
        return steps.kid.child(listener, {});
      },
    });
    const engine = engineFor([parent, listener]);
    const ref = { scope: 'acme', key: uniqueKey('dl-child') };
    await engine.start(parent, ref, {});
    const child = async () =>
      (await db().sql<{ key: string; status: string; outcome: string | null }[]>`
        select key, status, outcome from stepkey.ledger where scope = ${ref.scope} and parent_run = ${ref.key}`)[0];
    await expect.poll(async () => (await child())?.status, { timeout: PATIENCE_MS }).toBe('waiting');
    await expect.poll(() => status(ref), { timeout: PATIENCE_MS }).toBe('waiting');
    await pastDeadline(engine, ref);
    const ended = (await child())!;
    expect(ended.status).toBe('cancelled');
    expect(JSON.parse(ended.outcome!)).toMatchObject({ name: 'RunCancelled', data: { root: ref.key } });
  });

  it('waiting for a queue slot: the sweep ends it, its entry goes, the holder keeps its slot', async () => {
    const queue = defineQueue({ name: 'dl-queue', concurrency: 1 });
    const held = gatedWork('dl-queued');
    const engine = engineFor([held], { queues: [queue] });
    const holder = { scope: 'acme', key: uniqueKey('dl-holder') };
    const waiter = { scope: 'acme', key: uniqueKey('dl-waiter') };
    await engine.enqueue(held, holder, { id: holder.key }, { queue });
    await engine.enqueue(held, waiter, { id: waiter.key }, { queue, deadline: MINUTE });
    expect(await slotsHeld(db().sql, 'dl-queue')).toEqual({ held: 1, entries: 2 });
    await pastDeadline(engine, waiter);
    expect(await slotsHeld(db().sql, 'dl-queue')).toEqual({ held: 1, entries: 1 });
    gate(holder.key).open();
    await expect.poll(() => status(holder), { timeout: PATIENCE_MS }).toBe('completed');
  });

  it('parked on a child waiting on a queue for a slot: the sweep ends it, cancels the child, and its entry goes', async () => {
    const queue = defineQueue({ name: 'dl-child-queue', concurrency: 1 });
    const work = gatedWork('dl-queued-work');
    const parent = defineWorkflow({
      name: 'dl-queued-parent',
      version: 1,
      input: z.object({}),
      deadline: MINUTE,
      steps: { kid: step('kid.v1') },
      async run({ steps }) {
        return steps.kid.child(work, { id: 'child' }, { queue });
      },
    });
    const engine = engineFor([parent, work], { queues: [queue] });
    const holder = { scope: 'acme', key: uniqueKey('dl-qholder') };
    await engine.enqueue(work, holder, { id: holder.key }, { queue });
    await expect.poll(() => status(holder), { timeout: PATIENCE_MS }).toBe('in_progress');
    const ref = { scope: 'acme', key: uniqueKey('dl-qparent') };
    await engine.start(parent, ref, {});
    await expect.poll(() => status(ref), { timeout: PATIENCE_MS }).toBe('waiting');
    const child = async () =>
      (await db().sql<{ key: string; status: string; wait_kind: string | null; outcome: string | null }[]>`
        select key, status, wait_kind, outcome from stepkey.ledger where scope = ${ref.scope} and parent_run = ${ref.key}`)[0];
    expect(await child()).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
    expect(await slotsHeld(db().sql, 'dl-child-queue')).toEqual({ held: 1, entries: 2 });
    await pastDeadline(engine, ref);
    const ended = (await child())!;
    expect(ended.status).toBe('cancelled');
    expect(JSON.parse(ended.outcome!)).toMatchObject({ name: 'RunCancelled', data: { root: ref.key } });
    expect(await slotsHeld(db().sql, 'dl-child-queue')).toEqual({ held: 1, entries: 1 });
    gate(holder.key).open();
    await expect.poll(() => status(holder), { timeout: PATIENCE_MS }).toBe('completed');
    expect(await slotsHeld(db().sql, 'dl-child-queue')).toEqual({ held: 0, entries: 0 });
  });

  it('waiting for a limit’s slot: the sweep ends it, and the limit’s slots are as before', async () => {
    const single = defineLimit({ name: 'dl-limit', concurrency: 1 });
    const limited = defineWorkflow({
      name: 'dl-limited',
      version: 1,
      input: z.object({ id: z.string() }),
      steps: { use: step('use.v1', { limit: single, timeoutMs: LONG_LEASE_MS }) },
      async run({ input, steps }) {
        await steps.use.call(async () => gate(input.id).opened);
        return input.id;
      },
    });
    const engine = engineFor([limited], { limits: [single] });
    const holder = { scope: 'acme', key: uniqueKey('dl-lholder') };
    const waiter = { scope: 'acme', key: uniqueKey('dl-lwaiter') };
    const holding = engine.run(limited, holder, { id: holder.key });
    await expect.poll(() => limitHeld(db().sql, 'dl-limit'), { timeout: PATIENCE_MS }).toMatchObject({ held: 1, slots: 1 });
    expect(await engine.attempt(limited, waiter, { id: waiter.key }, { deadline: MINUTE })).toMatchObject({
      state: 'waiting',
      wait: { kind: 'limit' },
    });
    await pastDeadline(engine, waiter);
    expect(await limitHeld(db().sql, 'dl-limit')).toMatchObject({ held: 1, slots: 1 });
    gate(holder.key).open();
    expect(await holding).toBe(holder.key);
    expect(await limitHeld(db().sql, 'dl-limit')).toMatchObject({ held: 0, slots: 0 });
  });

  it('needing review: the sweep ends it', async () => {
    const once = defineWorkflow({
      name: 'dl-review',
      version: 1,
      input: z.object({}),
      deadline: MINUTE,
      steps: { pay: step('pay.v1', { atMostOnce: true, timeoutMs: 200, retry: { attempts: 2, initialDelayMs: 10 } }) },
      async run({ steps }) {
        return steps.pay.call(async ({ signal }) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))));
      },
    });
    const engine = engineFor([once]);
    const ref = { scope: 'acme', key: uniqueKey('dl-review') };
    await engine.attempt(once, ref, {});
    await expect.poll(async () => (await engine.get(ref))?.status, { timeout: PATIENCE_MS }).toBe('needs_review');
    await pastDeadline(engine, ref);
  });

  it('of a version no live process registers: the sweep of any process ends it', async () => {
    const starter = engineFor([sleeper]);
    const ref = { scope: 'acme', key: uniqueKey('dl-orphan') };
    expect(await starter.attempt(sleeper, ref, {})).toMatchObject({ state: 'waiting' });
    await starter.shutdown();
    const other = engineFor([listener]);
    await pastDeadline(other, ref);
  });

  it('keeps the first start’s deadline: the deadline is not part of the fingerprint', async () => {
    const engine = engineFor([listener]);
    const ref = { scope: 'acme', key: uniqueKey('dl-first') };
    const first = await engine.start(listener, ref, {}, { deadline: MINUTE });
    const again = await engine.start(listener, ref, {}, { deadline: 24 * 60 * MINUTE });
    expect({ first: first.started, again: again.started }).toEqual({ first: true, again: false });
    await expect.poll(() => status(ref), { timeout: PATIENCE_MS }).toBe('waiting');
    await pastDeadline(engine, ref);
  });

  it('is rerun with a new deadline', async () => {
    const staged = defineWorkflow({
      name: 'dl-staged',
      version: 1,
      input: z.object({}),
      deadline: MINUTE,
      steps: { first: step('first.v1'), nap: step('nap.v1') },
      async run({ steps }) {
        await steps.first.tx(async () => 'first');
        await steps.nap.sleep(60 * MINUTE);
        return 'woke';
      },
    });
    const engine = engineFor([staged]);
    const ref = { scope: 'acme', key: uniqueKey('dl-rerun') };
    await engine.attempt(staged, ref, {});
    await pastDeadline(engine, ref);
    const rerun = await engine.rerun(ref, { key: `${ref.key}-again`, from: 'first.v1' });
    const again = { scope: ref.scope, key: `${ref.key}-again` };
    await expect.poll(() => status(again), { timeout: PATIENCE_MS }).toBe('waiting');
    const [row] = await db().sql<{ left_ms: number }[]>`
      select (extract(epoch from deadline_at - now()) * 1000)::float8 as left_ms from stepkey.ledger where scope = ${again.scope} and key = ${again.key}`;
    // Its own deadline, from its own start (the workflow's minute), on a clock already moved past the old one.
    expect(row!.left_ms).toBeGreaterThan(MINUTE);
    expect(rerun.started).toBe(true);
  });

  it('is refused when it is not a deadline, before anything is stored', async () => {
    const engine = engineFor([listener]);
    for (const deadline of [-1, 0, Number.NaN, Number.POSITIVE_INFINITY, new Date('not a date')]) {
      const ref = { scope: 'acme', key: uniqueKey('dl-bad') };
      await expect(engine.start(listener, ref, {}, { deadline })).rejects.toMatchObject({ code: 'invalid_input' });
      expect(await status(ref)).toBeUndefined();
    }
    expect(() => defineWorkflow({ name: 'dl-bad-def', version: 1, input: z.object({}), steps: {}, deadline: -5, run: async () => 1 })).toThrow(
      /deadline is a positive, finite number of milliseconds or a Date/,
    );
  });
});
