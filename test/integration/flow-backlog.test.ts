/**
 * A queue with a backlog: once a process's dispatch of it has started runs
 * that waited in line, its next dispatch after an end takes the queue's lock
 * at once instead of looking first (the look would only find runs to start),
 * until a dispatch finds no run in line (not merely no slot free); then an
 * end looks again. Seen from the lock
 * an end's dispatch waits for while a transaction of the test holds it: a
 * look waits for it shared, a dispatch exclusively. An enqueue while its
 * process has seen a backlog still takes a slot that another process gave
 * back, at once, and waits in line when none is free.
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
  it('is dispatched after an end without the look while its last dispatch started runs, and looked at again once one found none in line', async () => {
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
    // c's end starts the last run in line; d's end takes the lock at once too, and finds none waiting.
    gate(c.key).open();
    await executing(last);
    expect(await waitedForByEnd(d)).toEqual(['ExclusiveLock']);
    // So the last run's end looks first again: it waits for the lock shared.
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
  it('takes a slot given back elsewhere at once; one that finds none free waits and starts once; a duplicate changes nothing', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-backlog-seen'), concurrency: 2 });
    const e = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const other = engineFor([held], { queues: [queue], sweepIntervalMs: NO_SWEEP });
    const [a, x, c, d, late] = ['a', 'x', 'c', 'd', 'late'].map((name) => ({ scope: 'acme', key: uniqueKey(`seen-${name}`) })) as [
      { scope: string; key: string }, { scope: string; key: string }, { scope: string; key: string }, { scope: string; key: string }, { scope: string; key: string },
    ];
    const executing = (ref: { key: string }) => expect.poll(() => executions.get(ref.key), { timeout: PATIENCE_MS, interval: 10 }).toBe(1);
    // a here and x in the other process hold both slots; c waits in line.
    const ha = await e.enqueue(held, a, { id: a.key }, { queue });
    const hx = await other.enqueue(held, x, { id: x.key }, { queue });
    const hc = await e.enqueue(held, c, { id: c.key }, { queue });
    expect([ha.queued, hx.queued, hc.queued]).toEqual([false, false, true]);
    // a's end: this process's dispatch starts c, a run that waited in line — a backlog seen here.
    gate(a.key).open();
    await executing(c);
    // x's end, in the other process, frees a slot; that process finds no run in line.
    gate(x.key).open();
    expect(await hx.result()).toEqual({ id: x.key });
    await expect.poll(() => slotsHeld(db().sql, queue.name), { timeout: PATIENCE_MS, interval: 10 }).toEqual({ held: 1, entries: 1 });
    // d, enqueued here behind the backlog seen, finds the slot free and none in line: started at once, under its claim's lease.
    const hd = await e.enqueue(held, d, { id: d.key }, { queue });
    expect(hd.queued).toBe(false);
    await executing(d);
    expect(await rowOf(d)).toEqual({ status: 'in_progress', wait_kind: null, leased: true });
    // late finds none free: it waits, parked for a slot, and its duplicate adds nothing.
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
    expect([a, x, c, d, late].map((ref) => executions.get(ref.key))).toEqual([1, 1, 1, 1, 1]);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});
