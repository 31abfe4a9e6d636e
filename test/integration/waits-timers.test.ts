/**
 * Durable timers: a run that sleeps parks — no lease, no process — and any
 * sweeper continues it once due (the process that parked it, at its time); its wake time is recorded once and never
 * restarted; a time already past continues at once; bad input is refused
 * before anything is stored.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

const HOUR = 60 * 60 * 1000;
const counts = new Map<string, number>();
const bump = (name: string): number => {
  counts.set(name, (counts.get(name) ?? 0) + 1);
  return counts.get(name)!;
};

const trial = defineWorkflow({
  name: 'timer-trial',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: {
    before: step('before.v1'),
    cooldown: step('cooldown.v1'),
    after: step('after.v1'),
  },
  async run({ input, steps }) {
    await steps.before.call(async () => bump(`before:${input.id}`));
    await steps.cooldown.sleep(HOUR);
    await steps.after.call(async () => bump(`after:${input.id}`));
    return 'done';
  },
});

/** A short sleep between two steps. */
const nap = defineWorkflow({
  name: 'timer-nap',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { rest: step('rest.v1'), after: step('after-nap.v1') },
  async run({ input, steps }) {
    await steps.rest.sleep(300);
    await steps.after.call(async () => bump(`nap:${input.id}`));
    return 'rested';
  },
});

/** A sleep for a second, then a step that waits for the test (counting the runs inside it at once). */
let inside = 0;
let most = 0;
const waiting: (() => void)[] = [];
const napThenHold = defineWorkflow({
  name: 'timer-nap-hold',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { rest: step('rest.v1'), hold: step('hold.v1') },
  async run({ steps }) {
    await steps.rest.sleep(1_000);
    await steps.hold.call(async () => {
      inside += 1;
      most = Math.max(most, inside);
      await new Promise<void>((resolve) => waiting.push(resolve));
      inside -= 1;
    });
    return 'held';
  },
});
const napQueue = defineQueue({ name: 'timer-naps', concurrency: 1 });

/** A long sleep, then a tx step that swallows a failed statement: its transaction is aborted, its commit fails. */
const napThenAbort = defineWorkflow({
  name: 'timer-nap-abort',
  version: 1,
  input: z.object({}),
  steps: { rest: step('rest.v1'), broken: step('broken.v1') },
  async run({ steps }) {
    await steps.rest.sleep(HOUR);
    await steps.broken.tx(async (_db, { sql }) => {
      await sql`select 1 / 0`.catch(() => undefined);
    });
    return 'unreachable';
  },
});

/** A long sleep, then a tx step that writes a row. */
const napThenWrite = defineWorkflow({
  name: 'timer-nap-write',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { rest: step('rest.v1'), write: step('write.v1') },
  async run({ input, steps }) {
    await steps.rest.sleep(HOUR);
    await steps.write.tx(async (_db, { sql }) => {
      await sql`insert into timer_writes (id) values (${input.id})`;
    });
    return 'written';
  },
});

const row = async (ref: { scope: string; key: string }) =>
  (
    await db().sql`select status, lease_token, locked_until, expires_at, wait_kind, wait_step,
                          (extract(epoch from wake_at) * 1000)::float8 as wake_at
                     from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`
  )[0]!;

describe('sleep', () => {
  it('parks the run without a lease; a sweeper continues it once due, each step once', async () => {
    const engine = testEngine(db(), [trial]);
    const ref = { scope: 'acme', key: uniqueKey('sleep') };
    const attempt = await engine.attempt(trial, ref, { id: ref.key });
    expect(attempt).toMatchObject({ state: 'waiting', replayed: false, wait: { kind: 'timer', step: 'cooldown.v1' } });
    const parked = await row(ref);
    expect(parked).toMatchObject({ status: 'waiting', lease_token: null, locked_until: null, expires_at: null, wait_kind: 'timer' });
    expect(engine.activeRuns).toBe(0);
    expect(await engine.get(ref)).toMatchObject({ status: 'waiting', wait: { kind: 'timer', step: 'cooldown.v1' } });
    // A repeat while it waits: the same answer, a replay; nothing runs.
    expect(await engine.attempt(trial, ref, { id: ref.key })).toMatchObject({ state: 'waiting', replayed: true });
    // Not due yet: no sweeper takes it.
    expect(await engine.sweep()).toBe(0);

    const rescuer = testEngine(db(), [trial]);
    rescuer.clock.advance(HOUR + 1_000);
    expect(await rescuer.sweep()).toBe(1);
    await expect.poll(async () => (await rescuer.get(ref))?.status).toBe('completed');
    expect(counts.get(`before:${ref.key}`)).toBe(1);
    expect(counts.get(`after:${ref.key}`)).toBe(1);
    const info = (await rescuer.get(ref))!;
    expect(info.steps.map((s) => s.name)).toEqual(['before.v1', 'cooldown.v1', 'after.v1']);
    expect(JSON.parse(info.steps[1]!.output!)).toEqual({ until: new Date(parked.wake_at as number).toISOString() });
    await engine.shutdown();
    await rescuer.shutdown();
  });

  it('wakes a short sleep parked here at its time, with no sweep and no caller waiting', async () => {
    // No sweeper runs, and start() leaves no one waiting for the result: only the process's own
    // wake at the sleep's end continues the run (a sweep would, up to its interval later).
    const engine = testEngine(db(), [nap]);
    const ref = { scope: 'acme', key: uniqueKey('nap') };
    await engine.start(nap, ref, { id: ref.key });
    await expect.poll(async () => (await row(ref)).status, { interval: 20 }).toBe('completed');
    expect(counts.get(`nap:${ref.key}`)).toBe(1);
    // It slept (its wake time recorded when it parked), and went on at that time, not before.
    const [slept] = await db().sql<{ until: string; went_on: number }[]>`
      select s.outcome::json->>'until' as until, (extract(epoch from a.completed_at) * 1000)::float8 as went_on
        from stepkey.steps s join stepkey.steps a on a.scope = s.scope and a.run_key = s.run_key and a.name = 'after-nap.v1'
       where s.scope = ${ref.scope} and s.run_key = ${ref.key} and s.name = 'rest.v1'`;
    expect(slept!.went_on).toBeGreaterThanOrEqual(Date.parse(slept!.until));
    await engine.shutdown();
  });

  it('arms the wake again when the database says the run is not due yet (its clock behind this host’s)', async () => {
    const engine = testEngine(db(), [napThenHold]);
    const ref = { scope: 'acme', key: uniqueKey('nap-skew') };
    // As if the database's clock ran a second behind: the park stores a wake time a second later than
    // this host computed, so by the database the run is due a second after the host's timer fires.
    expect(ref.key).toMatch(/^[\w-]+$/);
    await db().sql.unsafe(`
      create function public.skew_wake() returns trigger language plpgsql as $$
        begin new.wake_at := new.wake_at + interval '1 second'; return new; end $$;
      create trigger skew_wake before update on stepkey.ledger for each row
        when (new.key = '${ref.key}' and new.status = 'waiting' and old.status <> 'waiting')
        execute function public.skew_wake()`);
    try {
      await engine.start(napThenHold, ref, { id: ref.key });
      // Woken by its own timer, armed again (no sweep runs): it reaches the step after its sleep.
      await expect.poll(() => waiting.length, { interval: 20 }).toBe(1);
    } finally {
      await db().sql.unsafe('drop trigger skew_wake on stepkey.ledger; drop function public.skew_wake()');
    }
    // Not before its (database) time.
    const [late] = await db().sql<{ ms: number }[]>`
      select (extract(epoch from clock_timestamp() - wake_at) * 1000)::float8 as ms from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    expect(late!.ms).toBeGreaterThanOrEqual(0);
    waiting.shift()!();
    await expect.poll(async () => (await row(ref)).status).toBe('completed');
    await engine.shutdown();
  });

  it('takes no more runs at their wake time than it has room for; the sweep takes the rest', async () => {
    inside = 0;
    most = 0;
    const engine = testEngine(db(), [napThenHold], { maxConcurrentRuns: 2 });
    const refs = Array.from({ length: 6 }, () => ({ scope: 'acme', key: uniqueKey('nap-room') }));
    for (const ref of refs) await engine.start(napThenHold, ref, { id: ref.key });
    // Each parks and comes due a second later. The first two woken hold their step until the test
    // lets them go: every later wake finds no room, and its run stays parked.
    await expect.poll(() => inside, { interval: 20 }).toBe(2);
    const parked = async () => (await Promise.all(refs.map(row))).filter((r) => r.status === 'waiting');
    await expect.poll(async () => (await parked()).length, { interval: 20 }).toBe(4);
    // Past the last wake time: this process's timers fire in the order they are due, so each of the
    // four has fired (and found no room) by the time this one has.
    const lastWake = Math.max(...(await parked()).map((r) => r.wake_at as number));
    await sleep(Math.max(0, lastWake - Date.now()) + 100);
    expect(engine.activeRuns).toBe(2);
    expect(inside).toBe(2);
    expect(await parked()).toHaveLength(4);
    engine.startSweeper();
    for (let released = 0; released < refs.length; released += 1) {
      await expect.poll(() => waiting.length, { interval: 20 }).toBeGreaterThan(0);
      waiting.shift()!();
    }
    for (const ref of refs) await expect.poll(async () => (await row(ref)).status).toBe('completed');
    expect(most).toBe(2);
    await engine.shutdown();
  });

  it('dispatches the queue of a queued run that comes due, with no sweep', async () => {
    const engine = testEngine(db(), [nap], { queues: [napQueue] });
    const ref = { scope: 'acme', key: uniqueKey('nap-queued') };
    const handle = await engine.enqueue(nap, ref, { id: ref.key }, { queue: napQueue });
    // Parked on its sleep, it gave its slot back: only the queue's dispatch may start it again.
    await expect.poll(async () => (await row(ref)).status, { interval: 20 }).toBe('completed');
    await expect(handle.result()).resolves.toBe('rested');
    expect(counts.get(`nap:${ref.key}`)).toBe(1);
    expect((await engine.get(ref))!.steps.map((s) => s.name)).toEqual(['rest.v1', 'after-nap.v1']);
    await engine.shutdown();
  });

  it('never restarts its timer: woken and cut off before the sleep was recorded, it goes on at once', async () => {
    const engine = testEngine(db(), [trial]);
    const ref = { scope: 'acme', key: uniqueKey('same-time') };
    await engine.attempt(trial, ref, { id: ref.key });
    const wakeAt = (await row(ref)).wake_at as number;
    engine.clock.advance(HOUR + 1_000);
    expect(await engine.sweep()).toBe(1);
    await expect.poll(async () => (await row(ref)).status).toBe('completed');
    // As if the woken execution died before the sleep's record committed: back in progress, lease
    // run out, the sleep and what followed not recorded — the wait still on the row.
    await db().sql`delete from stepkey.steps where scope = ${ref.scope} and run_key = ${ref.key} and name in ('cooldown.v1', 'after.v1')`;
    await db().sql`update stepkey.ledger set status = 'in_progress', outcome = null, outcome_ok = null, completed_at = null,
                      expires_at = null, lease_token = gen_random_uuid(), locked_until = now()
                    where scope = ${ref.scope} and key = ${ref.key}`;
    expect(await engine.sweep()).toBe(1);
    await expect.poll(async () => (await row(ref)).status).toBe('completed');
    const info = (await engine.get(ref))!;
    expect(JSON.parse(info.steps.find((s) => s.name === 'cooldown.v1')!.output!)).toEqual({ until: new Date(wakeAt).toISOString() });
    // A replay never waits.
    expect(await engine.attempt(trial, ref, { id: ref.key })).toMatchObject({ state: 'completed', replayed: true });
    await engine.shutdown();
  });

  it('records a sleep woken at its time with the run\'s next commit, not in a transaction of its own', async () => {
    await db().sql`create table timer_writes (id text primary key)`;
    const engine = testEngine(db(), [napThenWrite]);
    const ref = { scope: 'acme', key: uniqueKey('nap-write') };
    expect(await engine.attempt(napThenWrite, ref, { id: ref.key })).toMatchObject({ state: 'waiting' });
    const wakeAt = (await row(ref)).wake_at as number;
    engine.clock.advance(HOUR + 1_000);
    expect(await engine.sweep()).toBe(1);
    await expect.poll(async () => (await row(ref)).status).toBe('completed');
    // The sleep's record, the tx step's row and record, and the run's completion: one transaction.
    const rows = await db().sql<{ name: string | null; xid: string }[]>`
      select name, xmin::text as xid from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}
      union all
      select name, xmin::text from stepkey.steps where scope = ${ref.scope} and run_key = ${ref.key}
      union all
      select 'business row', xmin::text from timer_writes where id = ${ref.key}`;
    expect(rows.map((r) => r.name).sort()).toEqual(['business row', 'rest.v1', 'timer-nap-write', 'write.v1']);
    expect(new Set(rows.map((r) => r.xid)).size).toBe(1);
    const info = (await engine.get(ref))!;
    expect(JSON.parse(info.steps.find((s) => s.name === 'rest.v1')!.output!)).toEqual({ until: new Date(wakeAt).toISOString() });
    await engine.shutdown();
  });

  it('keeps a woken sleep\'s record when the commit it rode fails and the run fails with it', async () => {
    const engine = testEngine(db(), [napThenAbort]);
    const ref = { scope: 'acme', key: uniqueKey('nap-abort') };
    expect(await engine.attempt(napThenAbort, ref, {})).toMatchObject({ state: 'waiting' });
    const wakeAt = (await row(ref)).wake_at as number;
    engine.clock.advance(HOUR + 1_000);
    expect(await engine.sweep()).toBe(1);
    await expect.poll(async () => (await row(ref)).status).toBe('failed');
    // The sleep is over for good: a resume (after a queue's requeue, say, which forgets the wait) never sleeps again.
    const info = (await engine.get(ref))!;
    expect(info.steps.map((s) => s.name)).toEqual(['rest.v1']);
    expect(JSON.parse(info.steps[0]!.output!)).toEqual({ until: new Date(wakeAt).toISOString() });
    await engine.shutdown();
  });

  it('continues at once for a time in the past, and refuses a bad duration or date before storing anything', async () => {
    const past = defineWorkflow({
      name: 'timer-past',
      version: 1,
      input: z.object({ at: z.number() }),
      steps: { wait: step('wait.v1') },
      async run({ input, steps }) {
        await steps.wait.sleepUntil(new Date(input.at));
        return 'went on';
      },
    });
    const bad = defineWorkflow({
      name: 'timer-bad',
      version: 1,
      input: z.object({ ms: z.unknown() }),
      steps: { wait: step('wait.v1') },
      async run({ input, steps }) {
        await steps.wait.sleep(input.ms === 'NaN' ? Number.NaN : input.ms === 'Infinity' ? Number.POSITIVE_INFINITY : (input.ms as number));
        return 'slept';
      },
    });
    const badDate = defineWorkflow({
      name: 'timer-bad-date',
      version: 1,
      input: z.object({}),
      steps: { wait: step('wait.v1') },
      async run({ steps }) {
        await steps.wait.sleepUntil('tomorrow' as unknown as Date);
        return 'slept';
      },
    });
    const engine = testEngine(db(), [past, bad, badDate]);
    expect(await engine.run(past, { scope: 'acme', key: uniqueKey('past') }, { at: Date.now() - 60_000 })).toBe('went on');
    for (const ms of [-1, 'NaN', 'Infinity']) {
      const ref = { scope: 'acme', key: uniqueKey('bad') };
      const error = await engine.run(bad, ref, { ms }).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/sleep\(ms\) needs a finite number of milliseconds ≥ 0/);
      expect((await engine.get(ref))!.steps).toEqual([]);
    }
    const dateRef = { scope: 'acme', key: uniqueKey('bad-date') };
    const error = await engine.run(badDate, dateRef, {}).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/sleepUntil\(date\) needs a valid Date, got the string "tomorrow"/);
    expect((await engine.get(dateRef))!.steps).toEqual([]);
    await engine.shutdown();
  });
});
