/**
 * A process's room (maxConcurrentRuns) and the runs its dispatches start:
 * an enqueue's batch and a dispatch after an end never start more than the
 * room left — counting the room other dispatches in flight hold — and a
 * process with none left starts at most one run over it per queue (a queue
 * only it dispatches), its end dispatching the queue again. Runs an enqueue
 * starts at once (its own) are its caller's start and not counted here.
 */
import { describe, expect, it } from 'vitest';
import { defineQueue } from '../../src/flow/define-queue.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gatedOneStep, gates, advisoryLocks, holdQueueLock, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const engineFor = enginesShutAfterEach(db, openAll);

/** One step that waits at its gate; the most runs executing it at once in this process (most()). */
const { workflow: gated, executions, most, resetMost } = gatedOneStep('flow-room-gated', gate);

const NO_SWEEP = 3_600_000;
const MINUTE = 60_000;
const refs = (prefix: string, n: number): KeyRef[] => Array.from({ length: n }, (_, i) => ({ scope: 'acme', key: uniqueKey(`${prefix}-${i}`) }));

/** How many of `runs` are in progress (started by a dispatch or an enqueue, not yet ended). */
async function inProgress(runs: readonly KeyRef[]): Promise<number> {
  const [row] = await db().sql<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger
     where scope = 'acme' and key = any(${runs.map((run) => run.key)}::text[]) and status = 'in_progress'`;
  return row!.n;
}

const status = async (ref: KeyRef) =>
  (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status;

/**
 * `n` runs put in line on `queue` by `e`, not due by its clock: due by the clock of an engine that
 * moves its own past their delay (the clock of `e` stays behind: it never finds them due).
 */
async function putInLine(e: ReturnType<typeof engineFor>, queue: { name: string }, prefix: string, n: number): Promise<KeyRef[]> {
  const line = refs(prefix, n);
  for (const ref of line) {
    expect(await e.enqueue(gated, ref, { id: ref.key }, { queue, delayMs: MINUTE })).toMatchObject({ queued: true });
  }
  return line;
}

describe('a process with no room left', () => {
  it('starts one run over it per queue from a burst of enqueues, not one per enqueue; the rest go on one at a time as each ends', async () => {
    resetMost();
    const queue = defineQueue({ name: uniqueKey('flow-room'), concurrency: 10 });
    const e = engineFor([gated], { queues: [queue], sweepIntervalMs: NO_SWEEP, maxConcurrentRuns: 1 });
    const [busy] = refs('busy', 1);
    // The one run of room is taken by a run of no queue.
    const running = await e.start(gated, busy!, { id: busy!.key });
    await expect.poll(() => executions.get(busy!.key), { timeout: PATIENCE_MS }).toBe(1);
    // Put in line by another process (see below), so that no dispatch of this one is in flight.
    const elsewhere = engineFor([gated], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const line = await putInLine(elsewhere, queue, 'line', 4);
    e.clock.advance(MINUTE + 1_000);
    // One after another (each its own group): each waits behind the runs due in line, and each batch
    // would dispatch them. Slots are free; room is not.
    const burst = refs('burst', 4);
    const handles = [];
    for (const ref of burst) handles.push(await e.enqueue(gated, ref, { id: ref.key }, { queue }));
    expect(handles.map((handle) => handle.queued)).toEqual([true, true, true, true]);
    // Every dispatch has answered: one run over the room, not four.
    expect(await inProgress([...line, ...burst])).toBe(1);
    // Each end dispatches the next, one over the room at a time.
    for (const ref of [busy!, ...line, ...burst]) gate(ref.key).open();
    for (const handle of handles) await handle.result();
    for (const ref of line) await expect.poll(async () => await status(ref), { timeout: PATIENCE_MS }).toBe('completed');
    expect(await running.result()).toEqual({ id: busy!.key });
    expect([...line, ...burst].map((ref) => executions.get(ref.key))).toEqual(Array(8).fill(1));
    expect(most()).toBeLessThanOrEqual(2);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});

describe('dispatches in flight at once', () => {
  it('share the room: two queues’ enqueue batches sent together start the room left, and one over it, not the room twice', async () => {
    const [first, second] = ['a', 'b'].map((name) => defineQueue({ name: uniqueKey(`flow-room-${name}`), concurrency: 10 }));
    const e = engineFor([gated], { queues: [first!, second!], sweepIntervalMs: NO_SWEEP, maxConcurrentRuns: 2 });
    // Put in line by another process, so that no dispatch of this one is in flight when the two
    // batches read the room.
    const elsewhere = engineFor([gated], { queues: [first!, second!], sweepIntervalMs: NO_SWEEP });
    const lines = [await putInLine(elsewhere, first!, 'first', 3), await putInLine(elsewhere, second!, 'second', 3)];
    e.clock.advance(MINUTE + 1_000);
    const [a, b] = refs('joined', 2);
    // Sent in the same tick: both groups read the room before either answers.
    const handles = await Promise.all([
      e.enqueue(gated, a!, { id: a!.key }, { queue: first! }),
      e.enqueue(gated, b!, { id: b!.key }, { queue: second! }),
    ]);
    expect(handles.map((handle) => handle.queued)).toEqual([true, true]);
    // The room of 2 to the first batch; the second, with none left, one run over it.
    expect(await inProgress(lines.flat())).toBe(3);
    for (const ref of [...lines.flat(), a!, b!]) gate(ref.key).open();
    for (const handle of handles) await handle.result();
    for (const ref of lines.flat()) await expect.poll(async () => await status(ref), { timeout: PATIENCE_MS }).toBe('completed');
    expect([...lines.flat(), a!, b!].map((ref) => executions.get(ref.key))).toEqual(Array(8).fill(1));
    for (const queue of [first!, second!]) expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});

describe('an owed dispatch left to a dispatch over the room', () => {
  it('is made when that dispatch started no run: a slot given back while an enqueue’s batch over the room waited for the lock still starts the run in line', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-room-owed'), concurrency: 2 });
    const e = engineFor([gated], { queues: [queue], sweepIntervalMs: NO_SWEEP, maxConcurrentRuns: 1 });
    const [busy, a, b] = refs('owed', 3);
    // The one run of room is taken by a run of no queue; `a`, enqueued here on an empty queue, takes
    // its slot at once (its caller's start, not counted against the room).
    const running = await e.start(gated, busy!, { id: busy!.key });
    await expect.poll(() => executions.get(busy!.key), { timeout: PATIENCE_MS }).toBe(1);
    const first = await e.enqueue(gated, a!, { id: a!.key }, { queue });
    expect(first.queued).toBe(false);
    await expect.poll(() => executions.get(a!.key), { timeout: PATIENCE_MS }).toBe(1);
    // In line, put there by another process, due a minute from now by this one's clock.
    const elsewhere = engineFor([gated], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const [later] = await putInLine(elsewhere, queue, 'owed-later', 1);
    // `b`'s batch asks for the one run over the room and, a slot seeming free, waits for the queue's lock.
    const release = await holdQueueLock(db().sql, queue.name);
    const second = e.enqueue(gated, b!, { id: b!.key }, { queue });
    // Its wait is the only one for the lock exclusive (a look after `later`'s entry elsewhere waits shared, and finds none due).
    await expect.poll(() => advisoryLocks(db().sql), { timeout: PATIENCE_MS }).toContain('ExclusiveLock');
    // Meanwhile `a` ends: its slot given back, its dispatch owed — left to the batch over the room.
    gate(a!.key).open();
    await expect.poll(async () => await status(a!), { timeout: PATIENCE_MS }).toBe('completed');
    await expect.poll(() => e.activeRuns, { timeout: PATIENCE_MS }).toBe(1);
    // `later` comes due after the batch was sent: the batch, by its clock, starts none but `b` at once.
    e.clock.advance(MINUTE + 1_000);
    await release();
    expect((await second).queued).toBe(false);
    // The dispatch owed to `a`'s end is made after the batch answers: `later` starts (no sweep runs).
    await expect.poll(() => executions.get(later!.key), { timeout: PATIENCE_MS }).toBe(1);
    for (const ref of [busy!, b!, later!]) gate(ref.key).open();
    expect(await running.result()).toEqual({ id: busy!.key });
    expect(await (await second).result()).toEqual({ id: b!.key });
    await expect.poll(async () => await status(later!), { timeout: PATIENCE_MS }).toBe('completed');
    expect([a!, b!, later!].map((ref) => executions.get(ref.key))).toEqual([1, 1, 1]);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});
