/**
 * Races around children and timers, interleaved by hand on real Postgres as
 * in waits-races.test.ts: a child failed by a process without its version; a
 * child's end chosen as a deadlock's victim against a cancel; an ended child
 * claimed while its parent has not resumed; timers and child leases armed in
 * a transaction open a while.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { heldStep, raceKit } from '../helpers/races.js';

const db = useTestDatabase({ max: 20 });
const { lockWaiters, deadlocks, openGate, status } = raceKit(db);

describe('a child failed by a process that does not register its version', () => {
  let letGo: (() => void) | undefined;
  const kid = defineWorkflow({
    name: 'races-kid',
    version: 1,
    input: z.object({}),
    steps: { work: step('work.v1', heldStep) },
    async run({ steps }) {
      await steps.work.call(() => new Promise<void>((resolve) => (letGo = resolve)));
      return 'done';
    },
  });
  const mom = defineWorkflow({
    name: 'races-mom',
    version: 1,
    input: z.object({}),
    steps: { kid: step('kid.v1') },
    async run({ steps }) {
      try {
        return await steps.kid.child(kid, {});
      } catch (error) {
        return `child ${(error as { status?: string }).status}`;
      }
    },
  });

  it('wakes the parent waiting on it', async () => {
    const a = testEngine(db(), [mom, kid]);
    const b = testEngine(db(), []);
    const ref = { scope: 'acme', key: uniqueKey('kid-version') };
    await a.start(mom, ref, {});
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    await expect.poll(() => letGo !== undefined).toBe(true);
    const child = (await a.get(ref))!.wait!.for!;
    // The child's lease runs out (as if its process had stalled). b's sweeper leaves it (b does not
    // register its version); an explicit resume in b takes it and, not knowing its version, fails it.
    b.clock.advance(a.leaseMs * 10);
    expect(await b.sweep()).toBe(0);
    await b.resume({ scope: ref.scope, key: child }).catch(() => undefined);
    await expect.poll(() => status(ref.scope, child)).toBe('failed');
    // The parent is due now (marked in the failing transaction): a's sweep continues it, and its
    // step gets the child's failure.
    expect((await a.get(ref))!.wait?.until ?? null).not.toBeNull();
    a.clock.advance(a.leaseMs * 10);
    expect(await a.sweep()).toBe(1);
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    expect(await a.run(mom, ref, {})).toBe('child failed');
    letGo!();
    await a.shutdown();
    await b.shutdown();
  });

  it('completes a child whose ending transaction was the victim of a deadlock with a cancel, by starting again', async () => {
    letGo = undefined;
    const a = testEngine(db(), [mom, kid]);
    const ref = { scope: 'acme', key: uniqueKey('kid-deadlock') };
    await a.start(mom, ref, {});
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    await expect.poll(() => letGo !== undefined).toBe(true);
    const child = (await a.get(ref))!.wait!.for!;
    const deadlocksBefore = await deadlocks();
    // A cancel, by hand: the parent's row locked, then the child's (as waits/cancel.ts does).
    const cancel = await openGate();
    await cancel.sql`set local deadlock_timeout = '60s'`;
    await cancel.sql`select 1 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key} for no key update`;
    letGo!();
    // The child's completion has its own row and waits for its parent's.
    await lockWaiters(1, 'for no key update');
    const childLocked = cancel.sql`update stepkey.ledger set updated_at = updated_at where scope = ${ref.scope} and key = ${child}`.execute();
    // The child's transaction detects the deadlock and is rolled back; the execution starts again
    // from the ledger and completes once the cancel by hand has let go.
    await childLocked;
    await cancel.release();
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    expect(await a.run(mom, ref, {})).toBe('done');
    expect(await status(ref.scope, child)).toBe('completed');
    await expect.poll(deadlocks).toBeGreaterThan(deadlocksBefore);
    await a.shutdown();
  });
});

describe('an ended child whose parent has not resumed yet', () => {
  let shipped = 0;
  let holdFirst = true;
  let releaseHeld: (() => void) | undefined;
  const parcel = defineWorkflow({
    name: 'races-parcel',
    version: 1,
    input: z.object({}),
    steps: { ship: step('ship.v1', heldStep) },
    async run({ steps }) {
      await steps.ship.call(async () => {
        if (holdFirst) {
          holdFirst = false;
          await new Promise<void>((resolve) => (releaseHeld = resolve));
        }
        shipped += 1;
      });
      return 'shipped';
    },
  });
  const order = defineWorkflow({
    name: 'races-order',
    version: 1,
    input: z.object({}),
    steps: { parcel: step('parcel.v1') },
    async run({ steps }) {
      return steps.parcel.child(parcel, {});
    },
  });

  it('is not forgotten by a claim of its key past its retention: the parent reads it, and nothing runs twice', async () => {
    const runner = testEngine(db(), [order, parcel]);
    const ref = { scope: 'acme', key: uniqueKey('late-parent') };
    await runner.start(order, ref, {});
    await expect.poll(() => releaseHeld !== undefined).toBe(true);
    const child = (await runner.get(ref))!.wait!.for!;
    // The child's process stalls; a process that runs only the child's workflow takes it over
    // and completes it. The parent is due, but no process that runs its workflow sweeps.
    const other = testEngine(db(), [parcel]);
    other.clock.advance(other.leaseMs * 10);
    expect(await other.sweep()).toBe(1);
    await expect.poll(() => status(ref.scope, child)).toBe('completed');
    expect(await status(ref.scope, ref.key)).toBe('waiting');
    expect(shipped).toBe(1);
    // A day passes before one does; meanwhile the child's key is claimed (a resume by hand).
    const later = testEngine(db(), [order, parcel]);
    later.clock.advance(later.retentionMs + later.leaseMs * 10 + 60_000);
    await expect(later.resume({ scope: ref.scope, key: child })).resolves.toMatchObject({ state: 'completed' });
    expect(await status(ref.scope, child)).toBe('completed');
    expect(await later.sweep()).toBe(1);
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    expect(shipped).toBe(1);
    releaseHeld!();
    await Promise.all([runner.shutdown(), other.shutdown(), later.shutdown()]);
  });
});

describe('a timer armed in a transaction that has been open a while', () => {
  const MINUTE = 60_000;
  const slowThenSleep = defineWorkflow({
    name: 'races-slow-sleep',
    version: 1,
    input: z.object({}),
    output: z.number(),
    steps: { slow: step('slow.v1', { output: z.number() }), nap: step('nap.v1') },
    async run({ steps }) {
      // A tx step whose transaction stays open until the next step boundary: the sleep's.
      const doneAt = await steps.slow.tx(async (_db, { sql }) => {
        const [row] = await sql<{ at: number }[]>`
          select pg_sleep(0.3), (extract(epoch from clock_timestamp()) * 1000)::float8 as at`;
        return row!.at;
      });
      await steps.nap.sleep(MINUTE);
      return doneAt;
    },
  });

  it('counts the sleep from when it is called, not from when that transaction began', async () => {
    const engine = testEngine(db(), [slowThenSleep]);
    const ref = { scope: 'acme', key: uniqueKey('slow-sleep') };
    await expect(engine.attempt(slowThenSleep, ref, {})).resolves.toMatchObject({ state: 'waiting' });
    const [row] = await db().sql<{ wake_at: number; done_at: string }[]>`
      select (extract(epoch from r.wake_at) * 1000)::float8 as wake_at, s.outcome as done_at
        from stepkey.ledger r join stepkey.steps s on s.scope = r.scope and s.run_key = r.key and s.name = 'slow.v1'
       where r.scope = ${ref.scope} and r.key = ${ref.key}`;
    expect(row!.wake_at).toBeGreaterThanOrEqual(Number(row!.done_at) + MINUTE);
    await engine.shutdown();
  });
});

describe('a child started in a transaction that has been open a while', () => {
  let letGo: (() => void) | undefined;
  const held = defineWorkflow({
    name: 'races-held',
    version: 1,
    input: z.object({}),
    steps: { work: step('work.v1', heldStep) },
    async run({ steps }) {
      await steps.work.call(() => new Promise<void>((resolve) => (letGo = resolve)));
      return 'held';
    },
  });
  const slowParent = defineWorkflow({
    name: 'races-slow-parent',
    version: 1,
    input: z.object({}),
    steps: { slow: step('slow.v1', { output: z.number() }), kid: step('kid.v1') },
    async run({ steps }) {
      // A while, in the transaction that the child's start then commits in.
      await steps.slow.tx(async (_db, { sql }) => {
        const [row] = await sql<{ at: number }[]>`select pg_sleep(0.6), (extract(epoch from clock_timestamp()) * 1000)::float8 as at`;
        return row!.at;
      });
      return steps.kid.child(held, {});
    },
  });

  it('gets a whole lease from its start, not one that ran out before it was committed', async () => {
    // No heartbeat meanwhile: the child's lease stays the one its start wrote.
    const engine = testEngine(db(), [slowParent, held], { heartbeatMs: 3_600_000 });
    const ref = { scope: 'acme', key: uniqueKey('slow-parent') };
    await engine.start(slowParent, ref, {});
    await expect.poll(() => letGo !== undefined).toBe(true);
    const child = (await engine.get(ref))!.wait!.for!;
    // Counted from the transaction's start, it would end sooner than a lease after the child's start
    // committed (a lease shorter than that transaction had run out before the commit: any sweeper
    // would take the child from the process that runs it).
    const [row] = await db().sql<{ locked_until: number; slow_done: string }[]>`
      select (extract(epoch from c.locked_until) * 1000)::float8 as locked_until, s.outcome as slow_done
        from stepkey.ledger c, stepkey.steps s
       where c.scope = ${ref.scope} and c.key = ${child}
         and s.scope = ${ref.scope} and s.run_key = ${ref.key} and s.name = 'slow.v1'`;
    expect(row!.locked_until).toBeGreaterThanOrEqual(Number(row!.slow_done) + engine.leaseMs);
    letGo!();
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    await engine.shutdown();
  });
});
