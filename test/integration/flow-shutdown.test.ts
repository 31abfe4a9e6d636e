/**
 * Shutdown and queues: an enqueue still in flight when its engine begins to
 * shut down may start runs waiting in line (its dispatch under the queue's
 * lock), but the engine executes none of them: it gives their leases up at
 * once — the shutdown resolves only once they are given up — and another
 * process's sweep takes each over in the slot it holds. No run begins to
 * execute in a process after its shutdown began.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gates, holdQueueLock, lockWaiters } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const engineFor = enginesShutAfterEach(db, openAll);

/** Per run id: how many times its step began. */
const executions = new Map<string, number>();
const counted = async (id: string, work: () => Promise<void> = async () => {}) => {
  executions.set(id, (executions.get(id) ?? 0) + 1);
  await work();
};

/** Registered only by the engine that holds the slot: the others never start it, it never starts theirs. */
const holder = defineWorkflow({
  name: 'flow-shutdown-holder',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { only: step('only.v1') },
  async run({ input, steps }) {
    await steps.only.call(() => counted(input.id, () => gate(input.id).opened));
  },
});
const queued = defineWorkflow({
  name: 'flow-shutdown-queued',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { only: step('only.v1') },
  async run({ input, steps }) {
    await steps.only.call(() => counted(input.id));
  },
});

/** A queued run's status, whether its lease has ended, and whether it holds its slot. */
const leaseAndSlot = async (key: string) =>
  (
    await db().sql<{ status: string; expired: boolean; holding: boolean }[]>`
      select l.status, l.locked_until <= now() as expired, e.holding
        from stepkey.ledger l join stepkey.queue_entries e on e.scope = l.scope and e.key = l.key
       where l.scope = 's' and l.key = ${key}`
  )[0];

/** Polled until it holds, for as long as a busy host may need. */
const patiently = { timeout: PATIENCE_MS, interval: 20 };

describe('a queue while its engine shuts down', () => {
  it('a run an in-flight enqueue starts after the shutdown began is not executed there; another process takes it over in its slot', async () => {
    const sql = db().sql;
    const queue = defineQueue({ name: uniqueKey('flow-shutdown'), concurrency: 1 });
    const [g, r, r2] = ['g', 'r', 'r2'].map((name) => uniqueKey(`flow-shutdown-${name}`));
    const slotEngine = engineFor([holder], { queues: [queue] });
    const stopping = engineFor([queued], { queues: [queue] });

    // g holds the queue's one slot; r waits in line.
    await slotEngine.enqueue(holder, { scope: 's', key: g! }, { id: g! }, { queue });
    await expect.poll(() => executions.get(g!) ?? 0, patiently).toBe(1);
    expect((await stopping.enqueue(queued, { scope: 's', key: r! }, { id: r! }, { queue })).queued).toBe(true);

    // The queue's lock held elsewhere; g ends, so a slot is free; an enqueue of r2 from the engine that
    // is about to stop finds it free and waits for the lock inside its transaction.
    const release = await holdQueueLock(sql, queue.name);
    let released = false;
    try {
      gate(g!).open();
      await expect.poll(async () => (await sql`select status from stepkey.ledger where scope = 's' and key = ${g!}`)[0]?.status, patiently).toBe('completed');
      const enqueued = stopping.enqueue(queued, { scope: 's', key: r2! }, { id: r2! }, { queue });
      enqueued.catch(() => {});
      // The enqueue of r2 waits for the queue's lock.
      await expect
        .poll(
          async () =>
            (await sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
                                         where wait_event_type = 'Lock' and query like '%insert into stepkey.queue_entries%'`)[0]!.n,
          patiently,
        )
        .toBeGreaterThanOrEqual(1);
      const stopped = stopping.shutdown({ timeoutMs: PATIENCE_MS });
      await release();
      released = true;
      await stopped;
      // Its dispatch under the lock started r (first in line) in the stopping engine, which gave r's
      // lease up at once instead of executing it — and the shutdown waited for that enqueue, its
      // lease given up before the shutdown resolved (the pool could close now): r is in progress,
      // holds the slot, its lease ended.
      expect(await leaseAndSlot(r!)).toEqual({ status: 'in_progress', expired: true, holding: true });
      expect((await enqueued).queued).toBe(true);
      expect(executions.get(r!) ?? 0).toBe(0);
    } finally {
      if (!released) await release();
    }

    // Another process's sweep takes r over in its slot; then r2 runs. Each once.
    engineFor([queued], { queues: [queue] }).startSweeper();
    await expect.poll(() => [executions.get(r!) ?? 0, executions.get(r2!) ?? 0], patiently).toEqual([1, 1]);
    await expect
      .poll(async () => (await sql<{ n: number }[]>`select count(*)::int as n from stepkey.ledger where scope = 's' and key in (${r!}, ${r2!}) and status = 'completed'`)[0]!.n, patiently)
      .toBe(2);
    expect(executions.get(r!)).toBe(1);
    expect(executions.get(r2!)).toBe(1);
  });
  it('a dispatch after an end, in flight when the shutdown began, gives the run it starts up before the shutdown resolves', async () => {
    const sql = db().sql;
    const queue = defineQueue({ name: uniqueKey('flow-shutdown-end'), concurrency: 2 });
    const [a, b, c] = ['a', 'b', 'c'].map((name) => uniqueKey(`flow-shutdown-end-${name}`));
    const stopping = engineFor([holder], { queues: [queue] });
    const other = engineFor([holder], { queues: [queue] });

    // a (here) and b (in another process) hold the queue's two slots; c waits in line (its gate open:
    // were it executed, it would end).
    gate(c!).open();
    await stopping.enqueue(holder, { scope: 's', key: a! }, { id: a! }, { queue });
    await other.enqueue(holder, { scope: 's', key: b! }, { id: b! }, { queue });
    await expect.poll(() => [executions.get(a!) ?? 0, executions.get(b!) ?? 0], patiently).toEqual([1, 1]);
    expect((await stopping.enqueue(holder, { scope: 's', key: c! }, { id: c! }, { queue })).queued).toBe(true);

    // The queue's lock held elsewhere; a ends, and its process's dispatch after the end waits for the lock.
    const release = await holdQueueLock(sql, queue.name);
    let released = false;
    try {
      gate(a!).open();
      // a's end committed first: a waiter seen before it could be a dispatch still in flight from c's
      // enqueue, and a shutdown begun then would find a's end after it (no dispatch from a closing engine).
      await expect
        .poll(async () => (await sql`select status from stepkey.ledger where scope = 's' and key = ${a!}`)[0]?.status, patiently)
        .toBe('completed');
      await expect.poll(() => lockWaiters(sql), patiently).toBeGreaterThanOrEqual(1);
      const stopped = stopping.shutdown({ timeoutMs: PATIENCE_MS });
      await release();
      released = true;
      await stopped;
      // That dispatch started c in the stopping engine, which gave its lease up before the shutdown resolved.
      expect(await leaseAndSlot(c!)).toEqual({ status: 'in_progress', expired: true, holding: true });
      expect(executions.get(c!) ?? 0).toBe(0);
    } finally {
      if (!released) await release();
    }

    // Another process's sweep takes c over in its slot: once.
    other.startSweeper();
    await expect.poll(() => executions.get(c!) ?? 0, patiently).toBe(1);
    await expect
      .poll(async () => (await sql<{ status: string }[]>`select status from stepkey.ledger where scope = 's' and key = ${c!}`)[0]?.status, patiently)
      .toBe('completed');
    expect(executions.get(c!)).toBe(1);
  });
});
