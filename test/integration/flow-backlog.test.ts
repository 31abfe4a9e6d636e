/**
 * A queue with a backlog: once a process's dispatch of it has started runs
 * that waited in line, its next dispatch after an end takes the queue's lock
 * at once instead of looking first (the look would only find runs to start),
 * until a dispatch finds no run in line (not merely no slot free); then an
 * end looks again. Seen from the lock
 * an end's dispatch waits for while a transaction of the test holds it: a
 * look waits for it shared, a dispatch exclusively.
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
