/**
 * Step limits in one process and two engines: a step that cannot take its
 * slot or token parks the run (no lease, no owner) and a slot given back
 * wakes a waiter at once, with no sweeper running; a slot is given back when
 * its step is recorded, when the run fails or is cancelled; a takeover keeps
 * the slot; a replayed step takes no token; partitions have slots of their
 * own; settings come from the limit's row. Bad input: flow-limits-input.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineLimit } from '../../src/flow/define-limit.js';
import { slotBackstopMs } from '../../src/flow/limit-acquire.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { gates, waitForRunsToEnd } from '../helpers/flow.js';
import { limitHeld, runRow } from '../helpers/limits.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';

const db = useTestDatabase();

/** Gates the test opens: a run waits at its step until its gate opens. */
const { gate, openAll, clear: clearGates } = gates();
const inside = new Set<string>();
let most = 0;
const executions = new Map<string, number>();

const pair = defineLimit({ name: 'lim-pair', concurrency: 2 });
const single = defineLimit({ name: 'lim-single', concurrency: 1 });
const slow = defineLimit({ name: 'lim-slow', rateLimit: { limit: 1, periodMs: 60_000 } });
const perAccount = defineLimit<{ account: string }>({ name: 'lim-account', partitionBy: (input) => input.account, perPartition: { concurrency: 1 } });
/** One token a minute, ten in the bucket; and the same with slots. */
const steady = defineLimit({ name: 'lim-steady', rateLimit: { limit: 10, periodMs: 600_000 } });
const steadySlots = defineLimit({ name: 'lim-steady-slots', rateLimit: { limit: 10, periodMs: 600_000 }, concurrency: 5 });
/** Held at a gate the test opens: no attempt timeout cuts a step first, however long a busy host takes. */
const heldStep = { timeoutMs: LONG_LEASE_MS };

/** The workflow most tests run; the takeover test runs a copy of its own, so that its sweeper takes no other test's runs. */
const heldWorkflow = (name: string) => defineWorkflow({
  name,
  version: 1,
  input: z.object({ id: z.string(), account: z.string().default('a') }),
  steps: {
    before: step('before.v1'),
    pair: step('pair.v1', { limit: 'lim-pair', ...heldStep }),
    single: step('single.v1', { limit: single, ...heldStep }),
    account: step('account.v1', { limit: perAccount, ...heldStep }),
  },
  async run({ input, steps }) {
    await steps.before.tx(async () => 'ok');
    const which = input.id.split(':')[0]!;
    const body = async () => {
      inside.add(input.id);
      most = Math.max(most, inside.size);
      executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
      try {
        await gate(input.id).opened;
      } finally {
        inside.delete(input.id);
      }
      return input.id;
    };
    if (which === 'pair') await steps.pair.call(body);
    else if (which === 'pairtx') await steps.pair.tx(body);
    else if (which === 'single') await steps.single.call(body);
    else await steps.account.call(body);
    return { id: input.id };
  },
});
const held = heldWorkflow('lim-held');
const heldAlone = heldWorkflow('lim-held-alone');

const metered = defineWorkflow({
  name: 'lim-metered',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { call: step('metered.v1', { limit: slow }) },
  async run({ input, steps }) {
    return steps.call.call(async () => input.id);
  },
});

const failing = defineWorkflow({
  name: 'lim-failing',
  version: 1,
  input: z.object({ id: z.string(), how: z.enum(['retry', 'stored']) }),
  steps: { call: step('failing.v1', { limit: 'lim-single', retry: { attempts: 2, initialDelayMs: 10 } }) },
  async run({ input, steps }) {
    return steps.call.call(async () => {
      throw input.how === 'retry' ? new Error('provider down') : new NonRetryableError('card declined');
    });
  },
});

const pacedBy = (limit: typeof steady) =>
  defineWorkflow({
    name: `${limit.name}-paced`,
    version: 1,
    input: z.object({ id: z.string() }),
    steps: { call: step('paced.v1', { limit }) },
    async run({ input, steps }) {
      return steps.call.call(async () => input.id);
    },
  });
const paced = { [steady.name]: pacedBy(steady), [steadySlots.name]: pacedBy(steadySlots) };

const limits = [pair, single, slow, perAccount, steady, steadySlots];
const engines: Engine[] = [];
const engine = (options: Parameters<typeof testEngine>[2] = {}) => {
  const e = testEngine(db(), [held, metered, failing, ...Object.values(paced)], { limits, ...options });
  engines.push(e);
  return e;
};

/** The database's clock, in epoch ms. */
const dbNowMs = async () => (await db().sql<{ ms: number }[]>`select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms`)[0]!.ms;
/** When a parked run is due (epoch ms). */
const untilMs = async (ref: { scope: string; key: string }) =>
  (await db().sql<{ ms: number }[]>`
    select (extract(epoch from wake_at) * 1000)::float8 as ms from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]!.ms;

afterEach(async () => {
  openAll();
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
  clearGates();
});

describe('step limits', () => {
  it('parks the runs that find no slot — no lease, no owner — and a slot given back wakes the next at once, with no sweeper', async () => {
    const e = engine();
    most = 0;
    const refs = Array.from({ length: 6 }, (_, i) => ({ scope: 'acme', key: uniqueKey(`pair-${i}`) }));
    const ids = refs.map((ref) => `pair:${ref.key}`);
    await Promise.all(refs.map((ref, i) => e.start(held, ref, { id: ids[i]! })));
    await expect.poll(() => inside.size).toBe(2);
    await expect.poll(async () => (await Promise.all(refs.map((ref) => runRow(db().sql, ref)))).filter((row) => row?.status === 'waiting').length).toBe(4);
    for (const ref of refs) {
      const row = await runRow(db().sql, ref);
      if (row?.status !== 'waiting') continue;
      // Parked: no lease token, no lease, and engine.get shows what it waits for.
      expect(row).toMatchObject({ wait_kind: 'limit', wait_for: 'lim-pair', lease_token: null, locked_until: null });
      expect((await e.get(ref))?.wait).toMatchObject({ kind: 'limit', for: 'lim-pair', step: 'pair.v1' });
    }
    expect(await limitHeld(db().sql, 'lim-pair')).toMatchObject({ held: 2, slots: 2 });
    // No sweeper runs in this engine: each waiter continues only because a slot given back woke it.
    for (let opened = 0; opened < 6; opened += 1) {
      await expect.poll(() => inside.size).toBe(Math.min(2, 6 - opened));
      gate([...inside][0]!).open();
    }
    for (const ref of refs) await waitForRunsToEnd(db().sql, ref.key);
    expect(most).toBe(2);
    expect(ids.every((id) => executions.get(id) === 1)).toBe(true);
    expect(await limitHeld(db().sql, 'lim-pair')).toMatchObject({ held: 0, slots: 0 });
  });

  it('holds a tx step’s slot through its transaction and gives it back in the step’s commit', async () => {
    const e = engine();
    const refs = ['a', 'b', 'c'].map((name) => ({ scope: 'acme', key: uniqueKey(`pairtx-${name}`) }));
    for (const ref of refs) await e.start(held, ref, { id: `pairtx:${ref.key}` });
    // Two hold the slots inside their transactions (whichever got there first); the third is parked.
    await expect.poll(() => inside.size).toBe(2);
    await expect.poll(async () => (await Promise.all(refs.map((ref) => runRow(db().sql, ref)))).filter((row) => row?.status === 'waiting').length).toBe(1);
    const parked = refs.find((ref) => !inside.has(`pairtx:${ref.key}`))!;
    expect(await limitHeld(db().sql, 'lim-pair')).toMatchObject({ held: 2, slots: 2 });
    for (const ref of refs) if (ref !== parked) gate(`pairtx:${ref.key}`).open();
    await expect.poll(() => inside.has(`pairtx:${parked.key}`)).toBe(true);
    gate(`pairtx:${parked.key}`).open();
    for (const ref of refs) await waitForRunsToEnd(db().sql, ref.key);
    expect(await limitHeld(db().sql, 'lim-pair')).toMatchObject({ held: 0, slots: 0 });
  });

  it('gives the slot back when the run fails or its step stores an error, and when a holder is cancelled', async () => {
    const e = engine();
    const retried = { scope: 'acme', key: uniqueKey('fail-retry') };
    await expect(e.run(failing, retried, { id: retried.key, how: 'retry' })).rejects.toThrow(/provider down/);
    expect((await runRow(db().sql, retried))?.status).toBe('failed');
    expect(await limitHeld(db().sql, 'lim-single')).toMatchObject({ held: 0, slots: 0 });
    const stored = { scope: 'acme', key: uniqueKey('fail-stored') };
    await expect(e.run(failing, stored, { id: stored.key, how: 'stored' })).rejects.toThrow(/card declined/);
    expect(await limitHeld(db().sql, 'lim-single')).toMatchObject({ held: 0, slots: 0 });

    const holder = { scope: 'acme', key: uniqueKey('cancel-holder') };
    const waiter = { scope: 'acme', key: uniqueKey('cancel-waiter') };
    await e.start(held, holder, { id: `single:${holder.key}` });
    await expect.poll(() => inside.has(`single:${holder.key}`)).toBe(true);
    await e.start(held, waiter, { id: `single:${waiter.key}` });
    await expect.poll(async () => (await runRow(db().sql, waiter))?.wait_kind).toBe('limit');
    expect(await e.cancel(holder, 'test')).toBe(true);
    // The holder's cancel gave its slot back and marked the waiter due: the sweeper (or a wake) takes it.
    e.startSweeper();
    await expect.poll(() => inside.has(`single:${waiter.key}`)).toBe(true);
    gate(`single:${waiter.key}`).open();
    await waitForRunsToEnd(db().sql, waiter.key);
    await waitForRunsToEnd(db().sql, holder.key);
    expect(await limitHeld(db().sql, 'lim-single')).toMatchObject({ held: 0, slots: 0 });
  });

  it('a sweeper that takes over a slot holder keeps its slot: the waiter does not get a second one', async () => {
    // Only this test's workflow: the second engine's sweeps take no run another test left behind.
    const alone = () => {
      const e = testEngine(db(), [heldAlone], { limits });
      engines.push(e);
      return e;
    };
    const first = alone();
    const holder = { scope: 'acme', key: uniqueKey('take-holder') };
    const waiter = { scope: 'acme', key: uniqueKey('take-waiter') };
    await first.start(heldAlone, holder, { id: `single:${holder.key}` });
    await expect.poll(() => inside.has(`single:${holder.key}`)).toBe(true);
    await first.start(heldAlone, waiter, { id: `single:${waiter.key}` });
    await expect.poll(async () => (await runRow(db().sql, waiter))?.wait_kind).toBe('limit');
    // The first process stalls: its heartbeat stops, and for the second its lease (and the waiter's backstop) have run out.
    await first.shutdown({ timeoutMs: 1 });
    const second = alone();
    second.clock.advance(slotBackstopMs(second.leaseMs) + 60_000);
    // The second takes the holder over: its second execution.
    await expect.poll(async () => (await second.sweep(), (await runRow(db().sql, holder))?.attempts)).toBe(2);
    // The holder's new execution re-took its own slot, under its new lease token; the waiter parked again.
    await expect
      .poll(async () => {
        const [row] = await db().sql<{ same: boolean }[]>`
          select s.token = l.lease_token as same from stepkey.limit_slots s
            join stepkey.ledger l on l.scope = s.scope and l.key = s.key
           where s.scope = ${holder.scope} and s.key = ${holder.key}`;
        return row?.same ?? false;
      })
      .toBe(true);
    await expect.poll(() => inside.has(`single:${holder.key}`)).toBe(true);
    await expect.poll(async () => (await runRow(db().sql, waiter))?.status).toBe('waiting');
    expect(await limitHeld(db().sql, 'lim-single')).toMatchObject({ held: 1, slots: 1 });
    expect(inside.has(`single:${waiter.key}`)).toBe(false);
    gate(`single:${holder.key}`).open();
    await waitForRunsToEnd(db().sql, holder.key);
    // The slot given back woke the waiter here, at once (no sweeper runs in this engine).
    await expect.poll(() => inside.has(`single:${waiter.key}`)).toBe(true);
    gate(`single:${waiter.key}`).open();
    await waitForRunsToEnd(db().sql, waiter.key);
    expect(executions.get(`single:${waiter.key}`)).toBe(1);
    expect(await limitHeld(db().sql, 'lim-single')).toMatchObject({ held: 0, slots: 0 });
  });

  it('gives each partition slots of its own', async () => {
    const e = engine();
    const a1 = { scope: 'acme', key: uniqueKey('acct-a1') };
    const a2 = { scope: 'acme', key: uniqueKey('acct-a2') };
    const b1 = { scope: 'acme', key: uniqueKey('acct-b1') };
    await e.start(held, a1, { id: `acct:${a1.key}`, account: 'a' });
    await e.start(held, b1, { id: `acct:${b1.key}`, account: 'b' });
    await expect.poll(() => inside.size).toBe(2);
    await e.start(held, a2, { id: `acct:${a2.key}`, account: 'a' });
    await expect.poll(async () => (await runRow(db().sql, a2))?.wait_for).toBe('lim-account[a]');
    expect((await e.get(a2))?.wait).toMatchObject({ kind: 'limit', for: 'lim-account[a]' });
    gate(`acct:${a1.key}`).open();
    await expect.poll(() => inside.has(`acct:${a2.key}`)).toBe(true);
    gate(`acct:${a2.key}`).open();
    gate(`acct:${b1.key}`).open();
    for (const ref of [a1, a2, b1]) await waitForRunsToEnd(db().sql, ref.key);
    expect(await limitHeld(db().sql, 'lim-account')).toMatchObject({ held: 0, slots: 0 });
  });

  it('a replayed step takes no token; a run that finds the bucket empty parks until the next token is due, behind those already waiting', async () => {
    const e = engine();
    const ref = { scope: 'acme', key: uniqueKey('metered') };
    // The bucket's one token is taken by this run, between these two instants (the database's clock).
    const tokenFrom = await dbNowMs();
    expect(await e.run(metered, ref, { id: ref.key })).toBe(ref.key);
    const tokenTo = await dbNowMs();
    expect(await e.run(metered, ref, { id: ref.key })).toBe(ref.key);
    expect((await limitHeld(db().sql, 'lim-slow')).granted).toBe(1);
    const next = { scope: 'acme', key: uniqueKey('metered-next') };
    await e.start(metered, next, { id: next.key });
    await expect.poll(async () => (await runRow(db().sql, next))?.wait_kind).toBe('limit');
    const row = await runRow(db().sql, next);
    expect(row).toMatchObject({ status: 'waiting', lease_token: null, locked_until: null });
    // One token per minute: the next is due a minute after the first was taken, and the run waits that long.
    const wakeAt = await untilMs(next);
    expect(wakeAt).toBeGreaterThanOrEqual(tokenFrom + 60_000 - 1);
    expect(wakeAt).toBeLessThanOrEqual(tokenTo + 60_000 + 1);
    expect((await limitHeld(db().sql, 'lim-slow')).granted).toBe(1);
    // A third waits a token longer: waiters come back spread out, in turn.
    const third = { scope: 'acme', key: uniqueKey('metered-third') };
    await e.start(metered, third, { id: third.key });
    await expect.poll(async () => (await runRow(db().sql, third))?.wait_kind).toBe('limit');
    expect(await untilMs(third)).toBeGreaterThanOrEqual(tokenFrom + 120_000 - 1);
    // Once the token is due (time moved on), a sweep continues the run.
    e.clock.advance(61_000);
    await e.sweep();
    await waitForRunsToEnd(db().sql, next.key);
    expect((await runRow(db().sql, third))?.status).toBe('waiting');
    e.clock.advance(60_000);
    await e.sweep();
    await waitForRunsToEnd(db().sql, third.key);
    expect((await limitHeld(db().sql, 'lim-slow')).granted).toBe(3);
  });

  for (const limit of [steady, steadySlots]) {
    const kind = limit.concurrency === null ? 'a rate-only limit' : 'a limit with free slots too';
    it(`a run that loses the last token to a concurrent acquire comes back a token later, not at the slot backstop (${kind})`, async () => {
      const e = engine();
      const workflow = paced[limit.name]!;
      const first = { scope: 'acme', key: uniqueKey('paced') };
      expect(await e.run(workflow, first, { id: first.key })).toBe(first.key);
      // Another acquirer takes the bucket's last token and has not committed: the partition row is locked.
      const rival = await db().sql.reserve();
      try {
        await rival`begin`;
        await rival`update stepkey.limit_partitions set tokens = 0, refilled_at = now() where limit_name = ${limit.name}`;
        const [{ ms: emptiedAt }] = (await rival`select (extract(epoch from now()) * 1000)::float8 as ms`) as unknown as [{ ms: number }];
        const next = { scope: 'acme', key: uniqueKey('paced-next') };
        await e.start(workflow, next, { id: next.key });
        // The acquire read the bucket (nine tokens) before it waited for the row; it decides on the row's new version.
        await expect.poll(async () => (await db().sql`
          select count(*)::int as n from pg_stat_activity
           where datname = current_database() and wait_event_type = 'Lock' and strpos(query, 'limit_partitions') > 0`)[0]!.n).toBe(1);
        await rival`commit`;
        await expect.poll(async () => (await runRow(db().sql, next))?.wait_kind, { interval: 10 }).toBe('limit');
        const parkedBy = await dbNowMs();
        // At most one token's time (a minute here) after it parked, not the backstop of a run waiting
        // for a slot (forty minutes here); and after the rival emptied the bucket.
        const wakeAt = await untilMs(next);
        expect(wakeAt).toBeGreaterThan(emptiedAt);
        expect(wakeAt).toBeLessThanOrEqual(parkedBy + 60_000 + 1);
        expect(slotBackstopMs(e.leaseMs)).toBeGreaterThan(60_000 * 10);
        // The token comes due (time moved on): a sweep continues the run.
        e.clock.advance(61_000);
        await e.sweep();
        await waitForRunsToEnd(db().sql, next.key);
      } finally {
        rival.release();
      }
    });
  }

  it('reads its settings from the limit’s row: the newest definition to start wins, in every engine', async () => {
    const wide = defineLimit({ name: 'lim-shared', concurrency: 5 });
    const narrow = defineLimit({ name: 'lim-shared', concurrency: 1 });
    const wf = (limit: typeof wide, version: number) =>
      defineWorkflow({
        name: 'lim-shared-wf',
        version,
        input: z.object({ id: z.string() }),
        steps: { s: step('shared.v1', { limit, ...heldStep }) },
        async run({ input, steps }) {
          return steps.s.call(async () => {
            inside.add(input.id);
            try {
              await gate(input.id).opened;
            } finally {
              inside.delete(input.id);
            }
            return 1;
          });
        },
      });
    const old = testEngine(db(), [wf(wide, 1)], { limits: [wide] });
    engines.push(old);
    const warm = { scope: 'acme', key: uniqueKey('shared-warm') };
    gate(`w:${warm.key}`).open();
    await old.run(wf(wide, 1), warm, { id: `w:${warm.key}` });
    const newer = testEngine(db(), [wf(narrow, 2)], { limits: [narrow] });
    engines.push(newer);
    const warm2 = { scope: 'acme', key: uniqueKey('shared-warm2') };
    gate(`w:${warm2.key}`).open();
    await newer.run(wf(narrow, 2), warm2, { id: `w:${warm2.key}` });
    // The old release (concurrency 5 in its code) now enforces the row's 1.
    const refs = [0, 1, 2].map((i) => ({ scope: 'acme', key: uniqueKey(`shared-${i}`) }));
    for (const ref of refs) await old.start(wf(wide, 1), ref, { id: `s:${ref.key}` });
    await expect.poll(() => inside.size).toBe(1);
    await expect.poll(async () => (await Promise.all(refs.map((ref) => runRow(db().sql, ref)))).filter((r) => r?.status === 'waiting').length).toBe(2);
    for (const ref of refs) gate(`s:${ref.key}`).open();
    for (const ref of refs) await waitForRunsToEnd(db().sql, ref.key);
    expect(await limitHeld(db().sql, 'lim-shared')).toMatchObject({ held: 0, slots: 0 });
  });
});
