/**
 * Queues: an enqueue that finds a free slot starts its run at once; one that
 * does not parks it (waiting for a slot, no lease) until a slot is given
 * back; the same ref again is the same run (another queue, priority or input
 * is a mismatch); priority orders a queue; a sweeper's takeover keeps the
 * run's slot; bad input is refused and stores nothing.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { isStepkeyError } from '../../src/errors/stepkey-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';
import { gates, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';

const db = useTestDatabase();

/** Gates the test opens: a run waits at its step until its gate opens. */
const { gate, openAll } = gates();
const started: string[] = [];
const executions = new Map<string, number>();

const work = defineWorkflow({
  name: 'flow-work',
  version: 1,
  input: z.object({ id: z.string(), tenant: z.string(), hold: z.boolean().default(false) }),
  // Held at a gate the test opens: no attempt timeout cuts it first, however long a busy host takes.
  steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS }) },
  async run({ input, steps }) {
    await steps.work.call(async () => {
      started.push(input.id);
      executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
      if (input.hold) await gate(input.id).opened;
      return input.id;
    });
    return { id: input.id };
  },
});

const napper = defineWorkflow({
  name: 'flow-napper',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { before: step('nap-before.v1'), nap: step('nap.v1'), after: step('nap-after.v1') },
  async run({ input, steps }) {
    await steps.before.call(async () => started.push(`${input.id}:before`));
    await steps.nap.sleep(3_600_000);
    await steps.after.call(async () => started.push(`${input.id}:after`));
    return 'rested';
  },
});

/** A short tx step: the completion rides its transaction, under its statement_timeout, and sees what was enqueued during it. */
const SHORT_STEP_MS = 1_500;
const quick = defineWorkflow({
  name: 'flow-quick-tx',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { write: step('quick-write.v1', { timeoutMs: SHORT_STEP_MS }) },
  async run({ input, steps }) {
    await steps.write.tx(async () => {
      started.push(input.id);
      await gate(input.id).opened;
    });
    return input.id;
  },
});

const single = defineQueue({ name: 'flow-single', concurrency: 1 });
const tenants = defineQueue<{ tenant: string }>({
  name: 'flow-tenants',
  concurrency: 3,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 1 },
});
const broken = defineQueue<{ tenant: string }>({
  name: 'flow-broken',
  concurrency: 3,
  partitionBy: (input) => {
    if (input.tenant === 'throw') throw new Error('no tenant here');
    return (input.tenant === 'number' ? 42 : input.tenant) as string;
  },
});

const rated = defineQueue({ name: 'flow-rated', concurrency: 50, rateLimit: { limit: 5, periodMs: 3_600_000 } });

const engines: Engine[] = [];
const engine = (options: Parameters<typeof testEngine>[2] = {}) => {
  const made = testEngine(db(), [work, napper, quick], { queues: [single, tenants, broken, rated], ...options });
  engines.push(made);
  return made;
};
afterEach(async () => {
  openAll();
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
});

const attemptsOf = async (ref: { scope: string; key: string }) =>
  (await db().sql<{ attempts: number }[]>`select attempts from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.attempts;

const status = async (ref: { scope: string; key: string }) =>
  (await db().sql<{ status: string; wait_kind: string | null; lease_token: string | null }[]>`
    select status, wait_kind, lease_token from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0];

describe('enqueue', () => {
  it('starts at once on a free slot; the next run parks for the slot and starts when the first ends', async () => {
    const e = engine();
    const first = { scope: 'acme', key: uniqueKey('first') };
    const second = { scope: 'acme', key: uniqueKey('second') };
    const a = await e.enqueue(work, first, { id: first.key, tenant: 't', hold: true }, { queue: single });
    expect(a).toMatchObject({ started: true, queued: false });
    const b = await e.enqueue(work, second, { id: second.key, tenant: 't' }, { queue: 'flow-single' });
    expect(b).toMatchObject({ started: true, queued: true });
    expect(await status(second)).toMatchObject({ status: 'waiting', wait_kind: 'slot', lease_token: null });
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 1, entries: 2 });
    // A sweep finds no free slot: the second run stays queued.
    await e.sweep();
    expect(await status(second)).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
    gate(first.key).open();
    expect(await a.result()).toEqual({ id: first.key });
    expect(await b.result()).toEqual({ id: second.key });
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 0 });
  });

  it('is idempotent by ref; another queue, priority or input is a mismatch', async () => {
    const e = engine();
    const holder = { scope: 'acme', key: uniqueKey('holder') };
    await e.enqueue(work, holder, { id: holder.key, tenant: 't', hold: true }, { queue: single });
    const ref = { scope: 'acme', key: uniqueKey('dup') };
    const input = { id: ref.key, tenant: 't' };
    await e.enqueue(work, ref, input, { queue: single, priority: 5 });
    const again = await e.enqueue(work, ref, input, { queue: single, priority: 5 });
    expect(again).toMatchObject({ started: false });
    const codes = [];
    for (const attempt of [
      () => e.enqueue(work, ref, input, { queue: single, priority: 6 }),
      () => e.enqueue(work, ref, input, { queue: tenants }),
      () => e.enqueue(work, ref, { ...input, tenant: 'u' }, { queue: single, priority: 5 }),
    ]) {
      codes.push(await attempt().then(() => 'accepted', (error: unknown) => (isStepkeyError(error) ? error.code : String(error))));
    }
    expect(codes).toEqual(['mismatch', 'mismatch', 'mismatch']);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 1, entries: 2 });
    gate(holder.key).open();
    await waitForRunsToEnd(db().sql, holder.key);
    await waitForRunsToEnd(db().sql, ref.key);
  });

  it('starts higher priorities first, then the first enqueued', async () => {
    const e = engine();
    const prefix = uniqueKey('prio');
    const holder = { scope: 'acme', key: `${prefix}-holder` };
    await e.enqueue(work, holder, { id: holder.key, tenant: 't', hold: true }, { queue: single });
    // The holder is in its step (it started at its enqueue, and reaches its first line after).
    await expect.poll(() => started.includes(holder.key)).toBe(true);
    const order = [
      ['low', -10],
      ['mid-1', 0],
      ['high', 1000],
      ['mid-2', 0],
      ['lowest', -1000],
    ] as const;
    for (const [name, priority] of order) {
      const ref = { scope: 'acme', key: `${prefix}-${name}` };
      await e.enqueue(work, ref, { id: ref.key, tenant: 't' }, { queue: single, priority });
    }
    const before = started.length;
    gate(holder.key).open();
    await waitForRunsToEnd(db().sql, prefix);
    expect(started.slice(before).map((id) => id.slice(prefix.length + 1))).toEqual(['high', 'mid-1', 'mid-2', 'low', 'lowest']);
  });

  it('serves partitions in turn, one slot each at most', async () => {
    const e = engine();
    const prefix = uniqueKey('parts');
    const holds: string[] = [];
    // Tenant a enqueues 4 runs first, then b and c one each: b and c start before a's second.
    for (const [tenant, n] of [['a', 4], ['b', 1], ['c', 1]] as const) {
      for (let i = 0; i < n; i += 1) {
        const ref = { scope: 'acme', key: `${prefix}-${tenant}${i}` };
        holds.push(ref.key);
        await e.enqueue(work, ref, { id: ref.key, tenant, hold: true }, { queue: tenants });
      }
    }
    expect(await slotsHeld(db().sql, 'flow-tenants')).toEqual({ held: 3, entries: 6 });
    for (const id of holds) gate(id).open();
    await waitForRunsToEnd(db().sql, prefix);
    const names = started.filter((id) => id.startsWith(prefix)).map((id) => id.slice(prefix.length + 1));
    expect(names.slice(0, 3).sort()).toEqual(['a0', 'b0', 'c0']);
    expect(names.slice(3)).toEqual(['a1', 'a2', 'a3']);
  });

  it('a sweeper that takes over a slot holder keeps its slot: no second run starts in it, and its end dispatches the queue', async () => {
    const first = engine();
    const ref = { scope: 'acme', key: uniqueKey('taken') };
    const next = { scope: 'acme', key: uniqueKey('next') };
    await first.enqueue(work, ref, { id: ref.key, tenant: 't', hold: true }, { queue: single });
    await first.enqueue(work, next, { id: next.key, tenant: 't' }, { queue: single });
    // The holder is in its call (its start committed, its row no longer locked by that transaction).
    await expect.poll(() => started.includes(ref.key)).toBe(true);
    // The first process stalls: its heartbeat stops, and for the second its lease has run out.
    await first.shutdown({ timeoutMs: 1 });
    const second = engine();
    second.clock.advance(second.leaseMs + 60_000);
    // A beat of the first process may still hold the run's row for a moment (the sweep skips locked rows).
    await expect.poll(async () => (await second.sweep(), await attemptsOf(ref))).toBe(2);
    expect(await status(next)).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 1, entries: 2 });
    // Another process's dispatch holds the queue's row as the holder ends: the dispatch after
    // that end waits for it (it may have counted the slot as held), rather than skip the queue.
    const other = await db().sql.reserve();
    try {
      await other`begin`;
      await other`select 1 from stepkey.queues where name = 'flow-single' for update`;
      gate(ref.key).open();
      await waitForRunsToEnd(db().sql, ref.key);
      expect(await status(next)).toMatchObject({ status: 'waiting', wait_kind: 'slot' });
      await other`commit`;
    } finally {
      other.release();
    }
    await waitForRunsToEnd(db().sql, next.key);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 0 });
    expect(executions.get(next.key)).toBe(1);
  });

  it('gives the slot back when a queued run is cancelled, and a cancelled queued run leaves the queue', async () => {
    const e = engine();
    const holder = { scope: 'acme', key: uniqueKey('cancel-holder') };
    const queued = { scope: 'acme', key: uniqueKey('cancel-queued') };
    const after = { scope: 'acme', key: uniqueKey('cancel-after') };
    await e.enqueue(work, holder, { id: holder.key, tenant: 't', hold: true }, { queue: single });
    await e.enqueue(work, queued, { id: queued.key, tenant: 't' }, { queue: single });
    await e.enqueue(work, after, { id: after.key, tenant: 't', hold: true }, { queue: single });
    expect(await e.cancel(queued)).toBe(true);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 1, entries: 2 });
    expect(await e.cancel(holder)).toBe(true);
    // Its slot is given back in the cancel's transaction, and the holder's execution here stops. The
    // dispatch after that end and a sweep's race for the queue's lock (a sweep skips a queue another
    // dispatch holds): whichever gets it starts the next run.
    await expect.poll(async () => (await e.sweep(), (await status(after))?.status)).toBe('in_progress');
    gate(after.key).open();
    gate(holder.key).open();
    await waitForRunsToEnd(db().sql, after.key);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 0 });
  });
});

describe('a queued run that completes', () => {
  it('hands its slot to a run enqueued during its tx step, while another transaction holds the queue’s lock past the step’s timeout', async () => {
    const e = engine();
    const run = { scope: 'acme', key: uniqueKey('quick') };
    const next = { scope: 'acme', key: uniqueKey('next') };
    await e.enqueue(quick, run, { id: run.key }, { queue: single });
    await expect.poll(() => started.includes(run.key)).toBe(true);
    await e.enqueue(work, next, { id: next.key, tenant: 't' }, { queue: single });
    // Another transaction holds the queue's lock (a dispatch, an enqueue) longer than the step's timeout.
    const holder = await db().sql.reserve();
    try {
      await holder`begin`;
      await holder`select pg_advisory_xact_lock(hashtextextended('stepkey.queue' || chr(30) || ${single.name}, 0))`;
      gate(run.key).open();
      await new Promise((resolve) => setTimeout(resolve, SHORT_STEP_MS * 2));
      await holder`commit`;
    } finally {
      holder.release();
    }
    await waitForRunsToEnd(db().sql, run.key);
    await waitForRunsToEnd(db().sql, next.key);
    expect(await status(run)).toMatchObject({ status: 'completed' });
    expect(await attemptsOf(run)).toBe(1);
    expect(executions.get(next.key)).toBe(1);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 0 });
  });
});

describe('a slot holder that parks', () => {
  it('gives its slot back while it sleeps, and is dispatched again — in a slot — once due', async () => {
    const e = engine();
    const sleeper = { scope: 'acme', key: uniqueKey('sleeper') };
    const other = { scope: 'acme', key: uniqueKey('other') };
    await e.enqueue(napper, sleeper, { id: sleeper.key }, { queue: single });
    await expect.poll(async () => (await status(sleeper))?.wait_kind).toBe('timer');
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 1 });
    // Its slot is free: the next run starts at once; it holds the slot while it runs.
    await e.enqueue(work, other, { id: other.key, tenant: 't', hold: true }, { queue: single });
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 1, entries: 2 });
    // The sleeper comes due, but its slot is taken: no sweep continues it outside a slot.
    e.clock.advance(3_600_001);
    await e.sweep();
    expect(await status(sleeper)).toMatchObject({ status: 'waiting', wait_kind: 'timer' });
    expect(started).not.toContain(`${sleeper.key}:after`);
    gate(other.key).open();
    await waitForRunsToEnd(db().sql, other.key);
    await waitForRunsToEnd(db().sql, sleeper.key);
    expect(started.filter((id) => id.startsWith(sleeper.key))).toEqual([`${sleeper.key}:before`, `${sleeper.key}:after`]);
    expect(await slotsHeld(db().sql, 'flow-single')).toEqual({ held: 0, entries: 0 });
  });
});

describe('a rate limit', () => {
  it('starts a burst of `limit` runs, then `limit` per period, never more than the bucket holds', async () => {
    const e = engine();
    const prefix = uniqueKey('rate');
    const startedOf = () => started.filter((id) => id.startsWith(prefix)).length;
    const settle = async (n: number) => {
      await expect.poll(startedOf).toBe(n);
      await expect.poll(() => e.activeRuns).toBe(0);
    };
    for (let i = 0; i < 12; i += 1) {
      const ref = { scope: 'acme', key: `${prefix}-${i}` };
      await e.enqueue(work, ref, { id: ref.key, tenant: 't' }, { queue: rated });
    }
    // The bucket holds 5: five start at once; the period is an hour, so nothing refills meanwhile.
    await settle(5);
    await e.sweep();
    await settle(5);
    // An hour later: five more, not seven — the bucket never holds more than its limit.
    // A sweep skips a queue whose row another dispatch holds (the one after a run's end): sweep until they start.
    const sweepUntil = async (n: number) => {
      await expect.poll(async () => (await e.sweep(), startedOf())).toBe(n);
      await settle(n);
    };
    e.clock.advance(3_600_000);
    await sweepUntil(10);
    e.clock.advance(10 * 3_600_000);
    await sweepUntil(12);
    await waitForRunsToEnd(db().sql, prefix);
    expect(await slotsHeld(db().sql, 'flow-rated')).toEqual({ held: 0, entries: 0 });
  });
});

describe('bad input', () => {
  it('names what is wrong and stores nothing', async () => {
    const e = engine();
    const cases: [string, () => Promise<unknown>][] = [];
    const ref = () => ({ scope: 'acme', key: uniqueKey('bad') });
    const refs: { scope: string; key: string }[] = [];
    const add = (label: string, call: (r: { scope: string; key: string }) => Promise<unknown>) => {
      const r = ref();
      refs.push(r);
      cases.push([label, () => call(r)]);
    };
    add('unknown queue', (r) => e.enqueue(work, r, { id: 'x', tenant: 't' }, { queue: 'nope' }));
    add('priority too high', (r) => e.enqueue(work, r, { id: 'x', tenant: 't' }, { queue: single, priority: 1001 }));
    add('priority not whole', (r) => e.enqueue(work, r, { id: 'x', tenant: 't' }, { queue: single, priority: 1.5 }));
    add('negative delay', (r) => e.enqueue(work, r, { id: 'x', tenant: 't' }, { queue: single, delayMs: -1 }));
    add('partitionBy throws', (r) => e.enqueue(work, r, { id: 'x', tenant: 'throw' }, { queue: broken }));
    add('partitionBy not a string', (r) => e.enqueue(work, r, { id: 'x', tenant: 'number' }, { queue: broken }));
    add('bad input', (r) => e.enqueue(work, r, { id: 1 as unknown as string, tenant: 't' }, { queue: single }));
    const messages: Record<string, string> = {};
    for (const [label, call] of cases) {
      messages[label] = await call().then(
        () => 'accepted',
        (error: unknown) => (isStepkeyError(error) ? `${error.code}: ${error.message}` : String(error)),
      );
    }
    expect(messages['unknown queue']).toMatch(/^invalid_options: Queue 'nope' is not registered/);
    expect(messages['priority too high']).toMatch(/^invalid_options: priority must be a whole number from -1000 to 1000, got 1001/);
    expect(messages['priority not whole']).toMatch(/^invalid_options: priority .* got 1\.5/);
    expect(messages['negative delay']).toMatch(/^invalid_options: delayMs/);
    expect(messages['partitionBy throws']).toMatch(/^invalid_input: Queue 'flow-broken': partitionBy threw: no tenant here/);
    expect(messages['partitionBy not a string']).toMatch(/^invalid_input: Queue 'flow-broken': partitionBy must return a non-empty string.*got number/);
    expect(messages['bad input']).toMatch(/^invalid_input: The input of workflow 'flow-work' is invalid/);
    const [stored] = await db().sql<{ n: number }[]>`
      select (select count(*) from stepkey.ledger where key = any(${refs.map((r) => r.key)}::text[]))
           + (select count(*) from stepkey.queue_entries where key = any(${refs.map((r) => r.key)}::text[])) as n`;
    expect(Number(stored!.n)).toBe(0);
  });

  it('defineQueue refuses a concurrency of 0 or below, and perPartition without partitionBy', () => {
    const message = (options: unknown) => {
      try {
        defineQueue(options as never);
        return 'accepted';
      } catch (error) {
        return isStepkeyError(error) ? `${error.code}: ${error.message}` : String(error);
      }
    };
    expect(message({ name: 'q', concurrency: 0 })).toBe("definition_error: Queue 'q': concurrency must be a whole number above 0, got 0.");
    expect(message({ name: 'q', concurrency: -3 })).toMatch(/concurrency must be a whole number above 0, got -3/);
    expect(message({ name: 'q', concurrency: 2, perPartition: { concurrency: 1 } })).toMatch(/perPartition needs a partitionBy/);
    expect(message({ name: 'q', concurrency: 2, partitionBy: () => 'x', perPartition: { concurrency: 0 } })).toMatch(
      /perPartition.concurrency must be a whole number above 0, got 0/,
    );
    expect(message({ name: '', concurrency: 2 })).toMatch(/the name must be/);
  });
});
