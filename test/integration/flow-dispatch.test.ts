/**
 * How a queued run gets its slot, with no sweep to fall back on: an enqueue
 * that finds a slot free takes it in its own transaction — but never ahead
 * of a run already due in line; an end and an enqueue that find the queue's
 * lock held dispatch the queue once the lock is free; and a run a dispatch
 * starts with nothing recorded executes from what the dispatch read (its
 * input, its deadline) without being loaded again.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { newRootKey } from '../../src/keys/derive.js';
import { purposeFingerprint } from '../../src/keys/fingerprint.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gates, holdQueueLock, lockWaiters, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const engineFor = enginesShutAfterEach(db, openAll);

/** The order runs reached their step in, and how many times each did. */
const started: string[] = [];
const executions = new Map<string, number>();
/** Runs whose step throws the first time it is reached (the run fails: one attempt). */
const failOnce = new Set<string>();

/** A one-step workflow named `name`: its step fails once if asked (failOnce), or waits at its gate (hold). */
const gatedWorkflow = <Name extends string>(name: Name) =>
  defineWorkflow({
    name,
    version: 1,
    input: z.object({ id: z.string(), hold: z.boolean().default(false) }),
    steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS, retry: { attempts: 1 } }) },
    async run({ input, steps }) {
      await steps.work.call(async ({ signal }) => {
        started.push(input.id);
        executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
        if (failOnce.delete(input.id)) throw new Error('fails the first time');
        if (input.hold) {
          await new Promise<void>((resolve, reject) => {
            void gate(input.id).opened.then(resolve);
            signal.addEventListener('abort', () => reject(signal.reason));
          });
        }
      });
      return { id: input.id };
    },
  });

const work = gatedWorkflow('flow-dispatch-work');
/** The same step in a workflow of its own: a process that registers only one of the two cannot start the other's runs. */
const other = gatedWorkflow('flow-dispatch-other');

/**
 * A queue of one slot (or `concurrency`), a test's own, on an engine that never sweeps during the
 * test: every start below is an enqueue's, an end's or a dispatch after them. `perPartition`: its runs
 * in one partition limited to that many slots — an end then hands its slot over under the queue's
 * lock, not by a swap.
 */
function setUp(concurrency = 1, perPartition?: number) {
  const single = defineQueue({
    name: uniqueKey('flow-dispatch'),
    concurrency,
    ...(perPartition === undefined ? {} : { partitionBy: () => 'one', perPartition: { concurrency: perPartition } }),
  });
  return { single, e: engineFor([work], { queues: [single], sweepIntervalMs: NO_SWEEP }) };
}
const NO_SWEEP = 3_600_000;
const MINUTE = 60_000;

const status = async (ref: KeyRef) =>
  (await db().sql<{ status: string; wait_kind: string | null }[]>`select status, wait_kind from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0];

describe('a queued run gets its slot', () => {
  it('in its enqueue when one is free, but never ahead of a run due in line before it', async () => {
    const { single, e } = setUp(1, 1);
    const [a, b, c] = ['a', 'b', 'c'].map((name) => ({ scope: 'acme', key: uniqueKey(`line-${name}`) }));
    const first = await e.enqueue(work, a!, { id: a!.key, hold: true }, { queue: single });
    expect(first).toMatchObject({ queued: false });
    const second = await e.enqueue(work, b!, { id: b!.key }, { queue: single });
    expect(second).toMatchObject({ queued: true });
    // The first run ends while another transaction holds the queue's lock: its end cannot hand the
    // slot to the second, whose dispatch waits for the lock; the slot is free meanwhile.
    const release = await holdQueueLock(db().sql, single.name);
    let third: Promise<{ queued: boolean }> | undefined;
    try {
      gate(a!.key).open();
      expect(await first.result()).toEqual({ id: a!.key });
      expect(await status(b!)).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
      // An enqueue now finds the slot free and waits for the lock, behind the end's dispatch.
      third = e.enqueue(work, c!, { id: c!.key }, { queue: single });
      await expect.poll(() => lockWaiters(db().sql), { timeout: PATIENCE_MS }).toBeGreaterThanOrEqual(2);
    } finally {
      await release();
    }
    const enqueued = await third!;
    expect(enqueued).toMatchObject({ queued: true });
    expect(await second.result()).toEqual({ id: b!.key });
    expect(await (enqueued as unknown as { result(): Promise<unknown> }).result()).toEqual({ id: c!.key });
    expect(started.filter((id) => [a!.key, b!.key, c!.key].includes(id))).toEqual([a!.key, b!.key, c!.key]);
    expect([a, b, c].map((ref) => executions.get(ref!.key))).toEqual([1, 1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from an end and an enqueue that found the queue’s lock held, once it is free', async () => {
    const { single, e } = setUp(1, 1);
    const [a, b] = ['a', 'b'].map((name) => ({ scope: 'acme', key: uniqueKey(`held-${name}`) }));
    const first = await e.enqueue(work, a!, { id: a!.key, hold: true }, { queue: single });
    const release = await holdQueueLock(db().sql, single.name);
    let second: Awaited<ReturnType<typeof e.enqueue>> | undefined;
    try {
      // The queue is full: this enqueue does not wait for the lock; its entry commits, its dispatch waits.
      second = await e.enqueue(work, b!, { id: b!.key }, { queue: single });
      expect(second).toMatchObject({ queued: true });
      // The first run's end finds the lock held too: its slot is given back, its dispatch waits.
      gate(a!.key).open();
      expect(await first.result()).toEqual({ id: a!.key });
      expect(await status(b!)).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
      expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 1 });
    } finally {
      await release();
    }
    expect(await second!.result()).toEqual({ id: b!.key });
    expect(executions.get(b!.key)).toBe(1);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from an end by a swap, with no lock: its slot goes to the next run even while another transaction holds the queue’s lock', async () => {
    const { single, e } = setUp();
    const [a, b] = ['a', 'b'].map((name) => ({ scope: 'acme', key: uniqueKey(`swap-${name}`) }));
    const first = await e.enqueue(work, a!, { id: a!.key, hold: true }, { queue: single });
    const second = await e.enqueue(work, b!, { id: b!.key }, { queue: single });
    expect(second).toMatchObject({ queued: true });
    const release = await holdQueueLock(db().sql, single.name);
    try {
      gate(a!.key).open();
      expect(await first.result()).toEqual({ id: a!.key });
      // The lock is still held: only the end's swap can have started it.
      expect(await second.result()).toEqual({ id: b!.key });
    } finally {
      await release();
    }
    expect([executions.get(a!.key), executions.get(b!.key)]).toEqual([1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from a dispatch that read the run: its input, and its deadline ends it while it executes', async () => {
    const { single, e } = setUp();
    const [a, b] = ['a', 'b'].map((name) => ({ scope: 'acme', key: uniqueKey(`fresh-${name}`) }));
    const first = await e.enqueue(work, a!, { id: a!.key, hold: true }, { queue: single });
    const second = await e.enqueue(work, b!, { id: b!.key, hold: true }, { queue: single, deadline: MINUTE });
    expect(second).toMatchObject({ queued: true });
    // The first run's end hands its slot over: the second starts from what that dispatch read.
    gate(a!.key).open();
    expect(await first.result()).toEqual({ id: a!.key });
    await expect.poll(() => started.includes(b!.key), { timeout: PATIENCE_MS }).toBe(true);
    expect(await status(b!)).toMatchObject({ status: 'in_progress' });
    // Past its deadline, with no sweep: the executing process ends it.
    e.clock.advance(MINUTE + 1_000);
    await expect.poll(async () => (await status(b!))?.status, { timeout: PATIENCE_MS }).toBe('deadline_exceeded');
    expect(executions.get(b!.key)).toBe(1);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('never from a duplicate’s enqueue — a mismatch here: it takes no lock, starts and writes nothing', async () => {
    const { single, e } = setUp(2);
    const ref = { scope: 'acme', key: uniqueKey('mismatch') };
    const first = await e.enqueue(work, ref, { id: ref.key, hold: true }, { queue: single });
    expect(first).toMatchObject({ queued: false });
    // A slot seems free, and another transaction holds the queue's lock: an enqueue that took the
    // lock would wait for it here.
    const release = await holdQueueLock(db().sql, single.name);
    try {
      await expect(e.enqueue(work, ref, { id: 'another input' }, { queue: single })).rejects.toMatchObject({ code: 'mismatch' });
      expect(await lockWaiters(db().sql)).toBe(0);
    } finally {
      await release();
    }
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 1, entries: 1 });
    gate(ref.key).open();
    expect(await first.result()).toEqual({ id: ref.key });
    expect(executions.get(ref.key)).toBe(1);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from a resume’s enqueue that found a slot free and a run due in line: that run executes here too, the resumed one after it', async () => {
    const { single, e } = setUp(2);
    const failed = { scope: 'acme', key: uniqueKey('resumed') };
    const due = { scope: 'acme', key: uniqueKey('due') };
    failOnce.add(failed.key);
    const first = await e.enqueue(work, failed, { id: failed.key }, { queue: single });
    await expect(first.result()).rejects.toThrow();
    const delayed = await e.enqueue(work, due, { id: due.key }, { queue: single, delayMs: MINUTE });
    expect(delayed).toMatchObject({ queued: true });
    // Due now, and no sweep: the resume takes the queue's lock and starts it; the resumed run follows.
    e.clock.advance(MINUTE + 1_000);
    const resumed = await e.enqueue(work, failed, { id: failed.key }, { queue: single });
    expect(resumed).toMatchObject({ requeued: true });
    expect(await delayed.result()).toEqual({ id: due.key });
    expect(await resumed.result()).toEqual({ id: failed.key });
    expect([executions.get(due.key), executions.get(failed.key)]).toEqual([1, 2]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from an enqueue on a full queue by a process with no room left, when the slot comes free in a process that cannot run it', async () => {
    const single = defineQueue({ name: uniqueKey('flow-dispatch'), concurrency: 1 });
    // The other process runs only the other workflow; this one has room for one run, taken below.
    const elsewhere = engineFor([other], { queues: [single], sweepIntervalMs: NO_SWEEP });
    const here = engineFor([work], { queues: [single], sweepIntervalMs: NO_SWEEP, maxConcurrentRuns: 1 });
    const [holder, busy, queued] = ['holder', 'busy', 'queued'].map((name) => ({ scope: 'acme', key: uniqueKey(`room-${name}`) }));
    const holding = await elsewhere.enqueue(other, holder!, { id: holder!.key, hold: true }, { queue: single });
    expect(holding).toMatchObject({ queued: false });
    const running = await here.start(work, busy!, { id: busy!.key, hold: true });
    await expect.poll(() => started.includes(busy!.key), { timeout: PATIENCE_MS }).toBe(true);
    const release = await holdQueueLock(db().sql, single.name);
    let enqueued: Awaited<ReturnType<typeof here.enqueue>> | undefined;
    try {
      // A full queue: no lock taken, the entry commits; this process owes the queue a dispatch.
      enqueued = await here.enqueue(work, queued!, { id: queued!.key }, { queue: single });
      expect(enqueued).toMatchObject({ queued: true });
      // The holder ends elsewhere while the lock is held: its slot is given back, not handed over.
      gate(holder!.key).open();
      expect(await holding.result()).toEqual({ id: holder!.key });
    } finally {
      await release();
    }
    // Only this process can run it, and it has no room: it starts it anyway, as its enqueue could have.
    expect(await enqueued!.result()).toEqual({ id: queued!.key });
    gate(busy!.key).open();
    expect(await running.result()).toEqual({ id: busy!.key });
    expect(executions.get(queued!.key)).toBe(1);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it.each([
    ['engine.resume', 'resume'],
    ['the same enqueue again', 'enqueue'],
  ] as const)('from the end of a run a claim took over — by %s — (its process died holding the slot): the run in line starts with no sweep', async (_, by) => {
    const { single, e } = setUp();
    const [dead, next] = ['dead', 'next'].map((name) => ({ scope: 'acme', key: uniqueKey(`taken-${name}`) }));
    const input = { id: dead!.key, hold: false };
    // A queued run in progress whose process died: its lease ran out, its entry still holds the slot.
    await db().sql`
      insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, lease_token, locked_until, attempts, version, input,
                                  root_key, created_at, updated_at)
      values (${dead!.scope}, ${dead!.key}, 'run', ${work.name}, ${purposeFingerprint(work.name, { input, queue: single.name, priority: 0 })},
              'in_progress', gen_random_uuid(), now() - interval '1 minute', 1, 1, ${JSON.stringify(input)}, ${newRootKey(dead!.scope, dead!.key)},
              now(), now())`;
    await db().sql`
      insert into stepkey.queues (name, concurrency) values (${single.name}, 1) on conflict (name) do nothing`;
    await db().sql`
      insert into stepkey.queue_entries (scope, key, queue, partition, holding, granted_at)
      values (${dead!.scope}, ${dead!.key}, ${single.name}, '', true, now())`;
    // Full: the next run waits in line.
    const waiting = await e.enqueue(work, next!, { id: next!.key }, { queue: single });
    expect(waiting).toMatchObject({ queued: true });
    // The claim takes the dead run over, and it runs to its end here, giving its slot back.
    if (by === 'resume') expect(await e.resume(dead!)).toMatchObject({ state: 'completed' });
    else expect(await (await e.enqueue(work, dead!, input, { queue: single })).result()).toEqual({ id: dead!.key });
    // No sweep: only a dispatch after that end can start the run in line.
    await expect.poll(async () => (await status(next!))?.status, { timeout: PATIENCE_MS }).toBe('completed');
    expect([executions.get(dead!.key), executions.get(next!.key)]).toEqual([1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('from a resume that put a failed run back in line, by a process with no room left: it owes the queue that dispatch', async () => {
    const single = defineQueue({ name: uniqueKey('flow-dispatch'), concurrency: 1 });
    const here = engineFor([work], { queues: [single], sweepIntervalMs: NO_SWEEP, maxConcurrentRuns: 1 });
    const [failed, busy] = ['failed', 'busy'].map((name) => ({ scope: 'acme', key: uniqueKey(`owed-${name}`) }));
    failOnce.add(failed!.key);
    const first = await here.enqueue(work, failed!, { id: failed!.key }, { queue: single });
    await expect(first.result()).rejects.toThrow();
    await expect.poll(async () => (await status(failed!))?.status, { timeout: PATIENCE_MS }).toBe('failed');
    // This process's one run of room is taken by a run of no queue.
    const running = await here.start(work, busy!, { id: busy!.key, hold: true });
    await expect.poll(() => started.includes(busy!.key), { timeout: PATIENCE_MS }).toBe(true);
    // Back in line; the queue's slot is free, and no other process will dispatch it: this one does, without room.
    expect(await here.resume(failed!)).toMatchObject({ state: 'waiting' });
    await expect.poll(async () => (await status(failed!))?.status, { timeout: PATIENCE_MS }).toBe('completed');
    gate(busy!.key).open();
    expect(await running.result()).toEqual({ id: busy!.key });
    expect(executions.get(failed!.key)).toBe(2);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  /** A process whose last queued run ended with no run waiting in line: its next ends hand nothing over in their commits. */
  async function sawNoneWaiting(e: ReturnType<typeof setUp>['e'], single: ReturnType<typeof setUp>['single']) {
    const ref = { scope: 'acme', key: uniqueKey('alone') };
    const alone = await e.enqueue(work, ref, { id: ref.key }, { queue: single });
    expect(await alone.result()).toEqual({ id: ref.key });
  }

  it('from an end that handed nothing over (none waited when this process last looked), after its commit: a run another process enqueued meanwhile', async () => {
    const { single, e } = setUp();
    const there = engineFor([work], { queues: [single], sweepIntervalMs: NO_SWEEP });
    await sawNoneWaiting(e, single);
    const [a, b] = ['a', 'b'].map((name) => ({ scope: 'acme', key: uniqueKey(`hint-${name}`) }));
    const first = await e.enqueue(work, a!, { id: a!.key, hold: true }, { queue: single });
    expect(first).toMatchObject({ queued: false });
    // Full: the other process's entry waits, and its look after its commit finds no slot free.
    const second = await there.enqueue(work, b!, { id: b!.key }, { queue: single });
    expect(second).toMatchObject({ queued: true });
    // No sweep: only the look after the first run's end can start it.
    gate(a!.key).open();
    expect(await first.result()).toEqual({ id: a!.key });
    expect(await second.result()).toEqual({ id: b!.key });
    expect([executions.get(a!.key), executions.get(b!.key)]).toEqual([1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  it('on a queue of more than one slot, from the look after an end (no hand-off): every slot given back goes on, with no sweep', async () => {
    const { single, e } = setUp(2);
    const refs = ['a', 'b', 'c', 'd'].map((name) => ({ scope: 'acme', key: uniqueKey(`look-${name}`) }));
    // Two hold both slots; two wait, seen waiting by this process (a hand-off would be sent if the queue had one).
    const handles = [];
    for (const [i, ref] of refs.entries()) handles.push(await e.enqueue(work, ref, { id: ref.key, hold: true }, { queue: single }));
    expect(handles.map((handle) => handle.queued)).toEqual([false, false, true, true]);
    for (const ref of refs.slice(0, 2)) gate(ref.key).open();
    // No sweep: only the looks after the two ends can start the waiting two.
    await expect.poll(() => refs.slice(2).every((ref) => executions.has(ref.key)), { timeout: PATIENCE_MS, interval: 10 }).toBe(true);
    for (const ref of refs.slice(2)) gate(ref.key).open();
    expect(await Promise.all(handles.map((handle) => handle.result()))).toEqual(refs.map((ref) => ({ id: ref.key })));
    expect(refs.map((ref) => executions.get(ref.key))).toEqual([1, 1, 1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  });

  /**
   * Once this process saw none waiting, on a queue of `concurrency` slots: another process's delayed run
   * comes due, and this process's enqueue finds a slot free but the due run before it — its entry
   * waits, its batch sends no dispatch, and the look after its commit starts the due run (first).
   */
  async function dueRunFirst(concurrency: number) {
    const { single, e } = setUp(concurrency);
    const there = engineFor([work], { queues: [single], sweepIntervalMs: NO_SWEEP });
    await sawNoneWaiting(e, single);
    const [due, next] = ['due', 'next'].map((name) => ({ scope: 'acme', key: uniqueKey(`hint-${name}`) }));
    // Another process enqueues a delayed run, unseen here.
    const delayed = await there.enqueue(work, due!, { id: due!.key }, { queue: single, delayMs: MINUTE });
    expect(delayed).toMatchObject({ queued: true });
    e.clock.advance(MINUTE + 1_000);
    const enqueued = await e.enqueue(work, next!, { id: next!.key }, { queue: single });
    expect(enqueued).toMatchObject({ queued: true });
    expect(await enqueued.result()).toEqual({ id: next!.key });
    expect(await delayed.result()).toEqual({ id: due!.key });
    // With one slot the due run goes first; with two, one dispatch starts both.
    if (concurrency === 1) expect(started.filter((id) => id === due!.key || id === next!.key)).toEqual([due!.key, next!.key]);
    expect([executions.get(due!.key), executions.get(next!.key)]).toEqual([1, 1]);
    expect(await slotsHeld(db().sql, single.name)).toEqual({ held: 0, entries: 0 });
  }

  it('from an enqueue that found a run due before it, when this process last saw none waiting: after its commit, the due run first', async () => {
    await dueRunFirst(1);
  });

  it('the same on a queue of more than one slot, where none waiting was learnt from the look after an end (no hand-off there)', async () => {
    await dueRunFirst(2);
  });
});
