/**
 * A queue with a backlog: once a process's dispatch of it has started runs
 * that waited in line, taken every free slot and left runs due in line, its next dispatch after an end
 * takes the queue's lock at once instead of looking first (the look would
 * only find runs to start), until a dispatch leaves or finds no run in line
 * (not merely no slot free); then an end looks again. Seen from the lock
 * an end's dispatch waits for while a transaction of the test holds it: a
 * look waits for it shared, a dispatch exclusively. An enqueue while its
 * process has seen a backlog takes no lock and no slot in its transaction:
 * its run waits in line, and the dispatch after its commit starts it when a
 * slot is free (one that another process gave back, say).
 */
import { describe, expect, it } from 'vitest';
import { defineQueue } from '../../src/flow/define-queue.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { advisoryLocks, gatedOneStep, gates, holdQueueLock, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const engineFor = enginesShutAfterEach(db, openAll);

/** One step that waits at its run's gate. */
const { workflow: held, executions } = gatedOneStep('flow-backlog-held', gate);

const NO_SWEEP = 3_600_000;

describe('a queue with a backlog', () => {
  it('is dispatched after an end without the look while its last dispatch left runs in line, and looked at again once one left none', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-backlog'), concurrency: 2 });
    const e = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const refs = ['a', 'b', 'c', 'd', 'e'].map((name) => ({ scope: 'acme', key: uniqueKey(`backlog-${name}`) }));
    const handles = [];
    for (const ref of refs) handles.push(await e.enqueue(held, ref, { id: ref.key }, { queue }));
    expect(handles.map((handle) => handle.queued)).toEqual([false, false, true, true, true]);
    const [a, b, c, d, last] = refs as [(typeof refs)[0], (typeof refs)[0], (typeof refs)[0], (typeof refs)[0], (typeof refs)[0]];
    const executing = (ref: { key: string }) => expect.poll(() => executions.get(ref.key), { timeout: PATIENCE_MS, interval: 10 }).toBe(1);

    /** What an end's dispatch waits for while the test holds the queue's lock; once it is let go, that dispatch has ended. */
    const waitedForByEnd = async (ref: { key: string }) => {
      const release = await holdQueueLock(db().sql, queue.name);
      let modes: string[];
      try {
        gate(ref.key).open();
        await expect.poll(() => advisoryLocks(db().sql), { timeout: PATIENCE_MS, interval: 10 }).toHaveLength(1);
        modes = await advisoryLocks(db().sql);
      } finally {
        await release();
      }
      await expect.poll(() => advisoryLocks(db().sql, 'all'), { timeout: PATIENCE_MS, interval: 10 }).toEqual([]);
      return modes;
    };
    // a's end looks (no dispatch from here has started a run yet) and starts c.
    gate(a.key).open();
    await executing(c);
    // b's end: the last dispatch started c, so it takes the lock at once (exclusively), and starts d.
    expect(await waitedForByEnd(b)).toEqual(['ExclusiveLock']);
    await executing(d);
    // c's end starts the last run in line, and leaves none in line behind it: no backlog now, so d's
    // end and the last run's look first again — each waits for the lock shared.
    gate(c.key).open();
    await executing(last);
    expect(await waitedForByEnd(d)).toEqual(['ShareLock']);
    expect(await waitedForByEnd(last)).toEqual(['ShareLock']);

    expect(await Promise.all(handles.map((handle) => handle.result()))).toEqual(refs.map((ref) => ({ id: ref.key })));
    expect(refs.map((ref) => executions.get(ref.key))).toEqual([1, 1, 1, 1, 1]);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});

/** The run's row as the ledger has it. */
const rowOf = async (ref: { scope: string; key: string }) =>
  (await db().sql<{ status: string; wait_kind: string | null; leased: boolean }[]>`
    select status, wait_kind, lease_token is not null and locked_until is not null as leased
      from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0];

describe('an enqueue behind a backlog seen', () => {
  it('takes no slot in its own transaction: a slot given back elsewhere goes to it by the dispatch after its commit; one that finds none free waits and starts once; a duplicate changes nothing', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-backlog-seen'), concurrency: 2 });
    const e = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const other = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    type Ref = { scope: string; key: string };
    const [a, x, c, y, d, late] = ['a', 'x', 'c', 'y', 'd', 'late'].map((name) => ({ scope: 'acme', key: uniqueKey(`seen-${name}`) })) as [Ref, Ref, Ref, Ref, Ref, Ref];
    const executing = (ref: { key: string }) => expect.poll(() => executions.get(ref.key), { timeout: PATIENCE_MS, interval: 10 }).toBe(1);
    // a here and x in the other process hold both slots; c and y wait in line.
    const ha = await e.enqueue(held, a, { id: a.key }, { queue });
    const hx = await other.enqueue(held, x, { id: x.key }, { queue });
    const hc = await e.enqueue(held, c, { id: c.key }, { queue });
    const hy = await e.enqueue(held, y, { id: y.key }, { queue });
    expect([ha.queued, hx.queued, hc.queued, hy.queued]).toEqual([false, false, true, true]);
    // a's end: this process's dispatch starts c, a run that waited in line, and leaves y in line — a backlog seen here.
    gate(a.key).open();
    await executing(c);
    // x's end, in the other process, starts y there; y's end finds no run in line, and frees a slot.
    gate(x.key).open();
    expect(await hx.result()).toEqual({ id: x.key });
    await executing(y);
    gate(y.key).open();
    expect(await hy.result()).toEqual({ id: y.key });
    await expect.poll(() => slotsHeld(db().sql, queue.name), { timeout: PATIENCE_MS, interval: 10 }).toEqual({ held: 1, entries: 1 });
    // d, enqueued here behind the backlog seen, takes no lock and no slot (runs are expected in line
    // before it): it waits, and the dispatch after its commit finds the slot free and starts it, with no sweep.
    const hd = await e.enqueue(held, d, { id: d.key }, { queue });
    expect(hd.queued).toBe(true);
    await executing(d);
    expect(await rowOf(d)).toEqual({ status: 'in_progress', wait_kind: null, leased: true });
    // The dispatch that started d left none in line: the backlog seen here is over. late tries for a
    // slot at once, finds none free: it waits, parked for a slot, and its duplicate adds nothing.
    const hl = await e.enqueue(held, late, { id: late.key }, { queue });
    expect(hl.queued).toBe(true);
    expect(await rowOf(late)).toEqual({ status: 'waiting', wait_kind: 'slot', leased: false });
    const again = await e.enqueue(held, late, { id: late.key }, { queue });
    expect(again.queued).toBe(false);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 2, entries: 3 });
    // c's end starts it.
    gate(c.key).open();
    await executing(late);
    gate(d.key).open();
    gate(late.key).open();
    expect(await Promise.all([ha, hc, hd, hl, again].map((handle) => handle.result()))).toEqual([a, c, d, late, late].map((ref) => ({ id: ref.key })));
    expect([a, x, c, y, d, late].map((ref) => executions.get(ref.key))).toEqual([1, 1, 1, 1, 1, 1]);
    // No backlog seen any more: an enqueue takes a free slot at once again, under its claim's lease.
    const fin: Ref = { scope: 'acme', key: uniqueKey('seen-fin') };
    const hf = await e.enqueue(held, fin, { id: fin.key }, { queue });
    expect(hf.queued).toBe(false);
    gate(fin.key).open();
    expect(await hf.result()).toEqual({ id: fin.key });
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});

describe('a backlog seen', () => {
  it('ends with the dispatch that leaves none due in line: a run delayed in line does not keep it, and the next enqueue takes a free slot at once', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-backlog-ends'), concurrency: 2 });
    const e = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    type Ref = { scope: string; key: string };
    const [later, a, b, c, d, f] = ['later', 'a', 'b', 'c', 'd', 'f'].map((name) => ({ scope: 'acme', key: uniqueKey(`ends-${name}`) })) as [Ref, Ref, Ref, Ref, Ref, Ref];
    const executing = (ref: { key: string }) => expect.poll(() => executions.get(ref.key), { timeout: PATIENCE_MS, interval: 10 }).toBe(1);
    // A run in line an hour from now, then a and b in both slots, c and d due in line.
    const handles = [await e.enqueue(held, later, { id: later.key }, { queue, delayMs: NO_SWEEP })];
    for (const ref of [a, b, c, d]) handles.push(await e.enqueue(held, ref, { id: ref.key }, { queue }));
    expect(handles.map((handle) => handle.queued)).toEqual([true, false, false, true, true]);
    // a's end starts c and leaves d due in line: a backlog. b's end starts d, and leaves only the run
    // not due yet in line: the backlog ends there.
    gate(a.key).open();
    await executing(c);
    gate(b.key).open();
    await executing(d);
    // c's end frees a slot that nothing due waits for.
    gate(c.key).open();
    await expect.poll(() => slotsHeld(db().sql, queue.name), { timeout: PATIENCE_MS, interval: 10 }).toEqual({ held: 1, entries: 2 });
    const hf = await e.enqueue(held, f, { id: f.key }, { queue });
    expect(hf.queued).toBe(false);
    expect(await rowOf(f)).toEqual({ status: 'in_progress', wait_kind: null, leased: true });
    // The delayed run starts once due.
    gate(d.key).open();
    gate(f.key).open();
    gate(later.key).open();
    e.clock.advance(NO_SWEEP + 1_000);
    await expect.poll(async () => (await e.sweep(), executions.get(later.key)), { timeout: PATIENCE_MS, interval: 10 }).toBe(1);
    expect(await Promise.all([...handles, hf].map((handle) => handle.result()))).toEqual([later, a, b, c, d, f].map((ref) => ({ id: ref.key })));
    expect([later, a, b, c, d, f].map((ref) => executions.get(ref.key))).toEqual([1, 1, 1, 1, 1, 1]);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});
