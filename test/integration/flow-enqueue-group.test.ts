/**
 * Enqueues on one queue at once from one process go together: one
 * transaction for the enqueues that arrive while another is in flight
 * (flow/enqueue-group.ts). Each caller still gets its own answer — a new
 * run, a duplicate, a mismatch, a failure of its own — and every run
 * executes once, within the queue's limit.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { gates, holdQueueLock, lockWaiters, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const engineFor = enginesShutAfterEach(db, openAll);

/** Per run id: how many times its step ran. The most steps running at one instant, per queue name. */
const executions = new Map<string, number>();
const running = new Map<string, number>();
const mostRunning = new Map<string, number>();

const work = defineWorkflow({
  name: 'flow-group-work',
  version: 1,
  input: z.object({ id: z.string(), queue: z.string(), hold: z.boolean().default(false), tenant: z.string().default('') }),
  steps: { only: step('only.v1') },
  async run({ input, steps }) {
    await steps.only.call(async () => {
      executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
      const now = (running.get(input.queue) ?? 0) + 1;
      running.set(input.queue, now);
      mostRunning.set(input.queue, Math.max(mostRunning.get(input.queue) ?? 0, now));
      try {
        if (input.hold) await gate(input.id).opened;
        // A little time in the step, so that runs overlap.
        await new Promise((resolve) => setTimeout(resolve, 2));
      } finally {
        running.set(input.queue, (running.get(input.queue) ?? 1) - 1);
      }
    });
    return { id: input.id };
  },
});

function setUp(concurrency: number) {
  const queue = defineQueue({ name: uniqueKey('flow-group'), concurrency });
  return { queue, e: engineFor([work], { queues: [queue] }) };
}

/** A step reached: executions counted it. */
async function reached(id: string): Promise<void> {
  const deadline = Date.now() + PATIENCE_MS;
  while (!executions.has(id)) {
    if (Date.now() > deadline) throw new Error(`run '${id}' never reached its step`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The distinct transaction times the runs of `prefix` were created at: one per transaction that enqueued them. */
async function transactionsOf(prefix: string): Promise<number> {
  const [row] = await db().sql<{ n: number }[]>`
    select count(distinct created_at)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '%'}`;
  return row!.n;
}

describe('enqueues on one queue at once, from one process', () => {
  it('share transactions; every run executes once, never more at once than the queue allows, no slot left', async () => {
    const { queue, e } = setUp(3);
    const prefix = uniqueKey('grouped');
    const ids = Array.from({ length: 40 }, (_, i) => `${prefix}-${i}`);
    const handles = await Promise.all(ids.map((id) => e.enqueue(work, { scope: 'group', key: id }, { id, queue: queue.name }, { queue })));
    expect(handles.every((handle) => handle.started)).toBe(true);
    const results = await Promise.all(handles.map((handle) => handle.result()));
    expect(results).toEqual(ids.map((id) => ({ id })));
    expect(ids.map((id) => executions.get(id))).toEqual(ids.map(() => 1));
    expect(mostRunning.get(queue.name)).toBeLessThanOrEqual(3);
    // 40 callers at once: the enqueues that arrived while one was in flight went together.
    expect(await transactionsOf(prefix)).toBeLessThan(40);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });

  it('answers each caller as if alone: a duplicate, a mismatch and new runs in one group', async () => {
    const { queue, e } = setUp(1);
    const [held, waiting] = [uniqueKey('held'), uniqueKey('waiting')];
    const holder = await e.enqueue(work, { scope: 'group', key: held }, { id: held, queue: queue.name, hold: true }, { queue });
    const queued = await e.enqueue(work, { scope: 'group', key: waiting }, { id: waiting, queue: queue.name }, { queue });
    expect(queued.queued).toBe(true);
    // A run holds the only slot: what follows waits its turn. The first new run goes alone; the
    // rest go together — a retry of the running run, a reuse of the waiting run's key with another
    // input, and new runs.
    const fresh = Array.from({ length: 6 }, () => uniqueKey('fresh'));
    const enqueueFresh = (id: string) => e.enqueue(work, { scope: 'group', key: id }, { id, queue: queue.name }, { queue });
    const [first, again, second, mismatch, ...rest] = await Promise.allSettled([
      enqueueFresh(fresh[0]!),
      e.enqueue(work, { scope: 'group', key: held }, { id: held, queue: queue.name, hold: true }, { queue }),
      enqueueFresh(fresh[1]!),
      e.enqueue(work, { scope: 'group', key: waiting }, { id: 'another input', queue: queue.name }, { queue }),
      ...fresh.slice(2).map(enqueueFresh),
    ]);
    const news = [first!, second!, ...rest];
    expect(again!.status === 'fulfilled' && !again!.value.started).toBe(true);
    expect(mismatch!.status).toBe('rejected');
    expect((mismatch as PromiseRejectedResult).reason).toBeInstanceOf(StepkeyError);
    expect(((mismatch as PromiseRejectedResult).reason as StepkeyError).code).toBe('mismatch');
    expect(news.every((result) => result.status === 'fulfilled' && result.value.started && result.value.queued)).toBe(true);
    // They went together: the group's runs share one transaction's time.
    const [row] = await db().sql<{ n: number }[]>`
      select count(distinct created_at)::int as n from stepkey.ledger where scope = 'group' and key = any(${fresh.slice(1)})`;
    expect(row!.n).toBe(1);
    gate(held).open();
    expect(await holder.result()).toEqual({ id: held });
    await queued.result();
    for (const result of news) expect(await (result as PromiseFulfilledResult<Awaited<ReturnType<typeof e.enqueue>>>).value.result()).toBeDefined();
    expect([held, waiting, ...fresh].map((id) => executions.get(id))).toEqual([held, waiting, ...fresh].map(() => 1));
    expect(mostRunning.get(queue.name)).toBe(1);
  });

  it('a statement that fails for one enqueue fails only that one; nothing of it is written', async () => {
    const { queue, e } = setUp(2);
    const sql = db().sql;
    // A fault in the database for one key only: its entry's insert raises.
    await sql.unsafe(`
      create or replace function public.flow_group_poison() returns trigger language plpgsql as $$
      begin
        if new.key like 'poison-%' then raise exception 'poisoned entry %', new.key; end if;
        return new;
      end $$`);
    await sql.unsafe(`create trigger flow_group_poison before insert on stepkey.queue_entries for each row execute function public.flow_group_poison()`);
    try {
      const poison = uniqueKey('poison');
      const good = Array.from({ length: 12 }, () => uniqueKey('good'));
      const keys = [...good.slice(0, 6), poison, ...good.slice(6)];
      const settled = await Promise.allSettled(keys.map((id) => e.enqueue(work, { scope: 'group', key: id }, { id, queue: queue.name }, { queue })));
      const failed = settled.filter((result) => result.status === 'rejected') as PromiseRejectedResult[];
      expect(failed).toHaveLength(1);
      expect(settled[keys.indexOf(poison)]!.status).toBe('rejected');
      expect(failed[0]!.reason).toBeInstanceOf(StepkeyError);
      expect(String((failed[0]!.reason as Error).message)).toContain('poisoned entry');
      for (const result of settled) if (result.status === 'fulfilled') await result.value.result();
      expect(good.map((id) => executions.get(id))).toEqual(good.map(() => 1));
      // The poisoned enqueue left no run and no entry.
      const [row] = await sql<{ runs: number; entries: number }[]>`
        select (select count(*) from stepkey.ledger where scope = 'group' and key = ${poison})::int as runs,
               (select count(*) from stepkey.queue_entries where key = ${poison})::int as entries`;
      expect(row).toEqual({ runs: 0, entries: 0 });
      expect(executions.has(poison)).toBe(false);
      expect(await slotsHeld(sql, queue.name)).toEqual({ held: 0, entries: 0 });
    } finally {
      await sql.unsafe('drop trigger flow_group_poison on stepkey.queue_entries');
    }
  }, PATIENCE_MS);

  it('a group whose last enqueue is a duplicate of a running run still starts what the others left waiting', async () => {
    // Concurrency 3, one slot per tenant; no sweep, so every start is an enqueue's or a dispatch's.
    const tenants = defineQueue<{ tenant: string }>({
      name: uniqueKey('flow-group-tenants'),
      concurrency: 3,
      partitionBy: (input) => input.tenant,
      perPartition: { concurrency: 1 },
    });
    const e = engineFor([work], { queues: [tenants], sweepIntervalMs: 3_600_000 });
    const input = (id: string, tenant: string, hold = false) => ({ id, queue: tenants.name, tenant, hold });
    const [held, waiting, other, fresh] = ['held', 'waiting', 'other', 'fresh'].map((name) => uniqueKey(name)) as [string, string, string, string];
    await e.enqueue(work, { scope: 'group', key: held }, input(held, 'p', true), { queue: tenants });
    await reached(held);
    // Tenant p is full: this one waits, due, at the head of the line.
    const queued = await e.enqueue(work, { scope: 'group', key: waiting }, input(waiting, 'p'), { queue: tenants });
    expect(queued.queued).toBe(true);
    // Three at once: `other` goes alone; `fresh` (tenant q, behind the waiting run, so it cannot take
    // a slot at once) and a retry of the running `held` go together, the retry last.
    const [a, b, c] = await Promise.all([
      e.enqueue(work, { scope: 'group', key: other }, input(other, 'r', true), { queue: tenants }),
      e.enqueue(work, { scope: 'group', key: fresh }, input(fresh, 'q'), { queue: tenants }),
      e.enqueue(work, { scope: 'group', key: held }, input(held, 'p', true), { queue: tenants }),
    ]);
    expect([a.started, b.started, c.started]).toEqual([true, true, false]);
    // A slot of the queue and tenant q's are free: `fresh` starts, with no sweep and nothing ending.
    await reached(fresh);
    await reached(other);
    expect(executions.has(waiting)).toBe(false);
    gate(held).open();
    gate(other).open();
    await queued.result();
    expect([held, waiting, other, fresh].map((id) => executions.get(id))).toEqual([1, 1, 1, 1]);
  }, PATIENCE_MS);

  it('refuses the enqueues still waiting for their group once the engine shuts down; they leave nothing', async () => {
    const { queue, e } = setUp(2);
    const sql = db().sql;
    // Another process's transaction holds the queue's lock: this process's first enqueue waits for it.
    const release = await holdQueueLock(sql, queue.name);
    const first = uniqueKey('first');
    const later = Array.from({ length: 4 }, () => uniqueKey('later'));
    const firstCall = e.enqueue(work, { scope: 'group', key: first }, { id: first, queue: queue.name }, { queue });
    while ((await lockWaiters(db().sql)) === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    const laterCalls = later.map((id) => e.enqueue(work, { scope: 'group', key: id }, { id, queue: queue.name }, { queue }));
    // Settled from here on: on a busy host the refusals can come before release() has answered.
    const settled = Promise.allSettled([firstCall, ...laterCalls]);
    const stopping = e.shutdown({ timeoutMs: 5_000 });
    await release();
    const [firstResult, ...laterResults] = await settled;
    await stopping;
    expect(firstResult!.status).toBe('fulfilled');
    for (const result of laterResults) {
      expect(result.status).toBe('rejected');
      expect(((result as PromiseRejectedResult).reason as StepkeyError).code).toBe('shutting_down');
    }
    const [row] = await sql<{ runs: number; entries: number }[]>`
      select (select count(*) from stepkey.ledger where scope = 'group' and key = any(${later}))::int as runs,
             (select count(*) from stepkey.queue_entries where key = any(${later}))::int as entries`;
    expect(row).toEqual({ runs: 0, entries: 0 });
  }, PATIENCE_MS);
});
