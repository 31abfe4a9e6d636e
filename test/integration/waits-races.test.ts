/**
 * Races around runs that wait, each interleaved by hand on real Postgres: a
 * test connection holds an uncommitted row that a statement of stepkey's must
 * wait for (a gate), pg_stat_activity shows who waits on a lock, and the gate
 * is let go only once every contender is where the race needs it. Covered: a
 * cancel racing a park on a new child; deadlocks between a cancel and a
 * child's end (each side the victim); a send racing the forgetting of an
 * expired run and the start of a new one under its key; a child failed by a
 * process without its version; an ended child claimed while its parent has
 * not resumed; timers and child leases armed in a transaction open a while.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { childKey } from '../../src/keys/derive.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 20 });

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `count` backends of this database wait for a lock in a statement containing `text` (bounded). */
async function lockWaiters(count: number, text = ''): Promise<void> {
  const deadline = Date.now() + PATIENCE_MS;
  while (Date.now() < deadline) {
    const [row] = await db().sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and strpos(query, ${text}) > 0`;
    if (row!.n >= count) return;
    await pause(10);
  }
  throw new Error(`never saw ${count} backends waiting for a lock within ${PATIENCE_MS} ms`);
}

/** A step the test holds at a gate: no attempt timeout cuts it first, however long a busy host takes. */
const heldStep = { timeoutMs: LONG_LEASE_MS };

/** Deadlocks Postgres has detected in this database (its statistics lag a moment: poll). */
const deadlocks = async () =>
  (await db().sql<{ n: number }[]>`select deadlocks::int as n from pg_stat_database where datname = current_database()`)[0]!.n;

/** A test connection with an open transaction: the gate. */
async function openGate() {
  const conn = await db().sql.reserve();
  await conn`begin`;
  return {
    sql: conn,
    async release() {
      await conn`rollback`;
      conn.release();
    },
  };
}

const status = async (scope: string, key: string) =>
  (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]?.status;

describe('cancel racing a wait', () => {
  let letGo: (() => void) | undefined;
  const sleeper = defineWorkflow({
    name: 'races-sleeper',
    version: 1,
    input: z.object({}),
    steps: { nap: step('nap.v1') },
    async run({ steps }) {
      await steps.nap.sleep(3_600_000);
      return 'rested';
    },
  });
  const parent = defineWorkflow({
    name: 'races-parent',
    version: 1,
    input: z.object({}),
    steps: { first: step('first.v1', heldStep), kid: step('kid.v1') },
    async run({ steps }) {
      await steps.first.call(() => new Promise<void>((resolve) => (letGo = resolve)));
      return steps.kid.child(sleeper, {});
    },
  });

  it('cancels the child that a parent starts and parks on while the cancel is under way', async () => {
    const engine = testEngine(db(), [parent, sleeper]);
    const ref = { scope: 'acme', key: uniqueKey('cancel-race') };
    await engine.start(parent, ref, {});
    await expect.poll(() => letGo !== undefined).toBe(true);
    const [{ root_key: root } = { root_key: '' }] = await db().sql<{ root_key: string }[]>`
      select root_key from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    const kid = childRunKey(childKey(root, 'kid.v1'));
    // The gate: the child's key inserted and not committed, so the parent's wait — its run row
    // locked, the child found missing — waits at the child's insert, before its park commits.
    const gate = await openGate();
    await gate.sql`
      insert into stepkey.ledger (scope, key, kind, fingerprint, status, lease_token, locked_until)
      values (${ref.scope}, ${kid}, 'run', 'gate', 'in_progress', gen_random_uuid(), now())`;
    letGo!();
    await lockWaiters(1);
    const cancelling = engine.cancel(ref, 'customer cancelled');
    await lockWaiters(2);
    await gate.release();
    expect(await cancelling).toBe(true);
    expect(await status(ref.scope, ref.key)).toBe('cancelled');
    // The parent had parked on the child by the time the cancel took its row: the child goes too.
    await expect.poll(() => status(ref.scope, kid)).not.toBe('in_progress');
    expect(await status(ref.scope, kid)).toBe('cancelled');
    await engine.shutdown();
  });

  it('retries a cancel chosen as the victim of a deadlock with a child that is ending', async () => {
    letGo = undefined;
    const engine = testEngine(db(), [parent, sleeper]);
    const ref = { scope: 'acme', key: uniqueKey('cancel-deadlock') };
    await engine.start(parent, ref, {});
    await expect.poll(() => letGo !== undefined).toBe(true);
    letGo!();
    await expect.poll(async () => (await engine.get(ref))?.wait?.for ?? null).not.toBeNull();
    const kid = (await engine.get(ref))!.wait!.for!;
    await expect.poll(() => status(ref.scope, kid)).toBe('waiting');
    const deadlocksBefore = await deadlocks();
    // The child's end, by hand: its own row locked, then its parent's (as executor.ts does).
    const ending = await openGate();
    await ending.sql`set local deadlock_timeout = '60s'`;
    await ending.sql`update stepkey.ledger set updated_at = updated_at where scope = ${ref.scope} and key = ${kid}`;
    // A share lock on the parent holds the cancel back until the child's end waits for it too.
    const hold = await openGate();
    await hold.sql`select 1 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key} for share`;
    const cancelling = engine.cancel(ref, 'customer cancelled');
    await lockWaiters(1, 'for no key update');
    const parentLocked = ending.sql`select 1 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key} for no key update`.execute();
    await lockWaiters(2, 'for no key update');
    // The cancel takes the parent, waits for the child: a deadlock it detects (its timeout is the
    // shorter), so it is the victim; it tries again once the child's end has committed.
    await hold.release();
    await parentLocked;
    await ending.sql`commit`;
    ending.sql.release();
    expect(await cancelling).toBe(true);
    expect(await status(ref.scope, ref.key)).toBe('cancelled');
    expect(await status(ref.scope, kid)).toBe('cancelled');
    await expect.poll(deadlocks).toBeGreaterThan(deadlocksBefore);
    await engine.shutdown();
  });
});

describe('a send racing a wait that is parking', () => {
  let firstHold: (() => void) | undefined;
  const gated = defineWorkflow({
    name: 'races-gated',
    version: 1,
    input: z.object({}),
    events: { note: z.object({ n: z.number() }) },
    steps: { first: step('first.v1', heldStep), prep: step('prep.v1'), note: step('note.v1') },
    async run({ steps }) {
      await steps.first.call(() => new Promise<void>((resolve) => (firstHold = resolve)));
      // A tx step's row commits with the next step: here, with the wait's park.
      await steps.prep.tx(async () => 'prepared');
      const got = await steps.note.waitForEvent('note');
      return got.payload.n;
    },
  });

  it('wakes the run: the send waits for the park to commit, then finds the run parked', async () => {
    const engine = testEngine(db(), [gated]);
    const ref = { scope: 'acme', key: uniqueKey('park-race') };
    await engine.start(gated, ref, {});
    await expect.poll(() => firstHold !== undefined).toBe(true);
    const [{ root_key: root } = { root_key: '' }] = await db().sql<{ root_key: string }[]>`
      select root_key from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    // The gate: the tx step's key held uncommitted, so the wait — its run row locked, its
    // mailbox found empty — waits at the step's row, before its park commits.
    const gate = await openGate();
    await gate.sql`
      insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, completed_at)
      values (${ref.scope}, ${childKey(root, 'prep.v1')}, ${ref.key}, 'gate', '{}', true, 1, now())`;
    firstHold!();
    await lockWaiters(1, 'json_to_recordset');
    const sending = engine.send(ref, 'note', { n: 5 }, { key: 'k' });
    await lockWaiters(1, 'for no key update');
    await gate.release();
    await expect(sending).resolves.toMatchObject({ delivered: true });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    expect(await engine.run(gated, ref, {})).toBe(5);
    await engine.shutdown();
  });
});

describe('a send racing the forgetting of an expired run', () => {
  const mail = defineWorkflow({
    name: 'races-mail',
    version: 1,
    input: z.object({ round: z.number() }),
    events: { note: z.object({ n: z.number() }) },
    steps: { note: step('note.v1') },
    async run({ steps }) {
      const got = await steps.note.waitForEvent('note');
      return got.payload.n;
    },
  });

  it('leaves no message of the forgotten run for the new run under the same key', async () => {
    const engine = testEngine(db(), [mail]);
    const ref = { scope: 'acme', key: uniqueKey('forget-race') };
    await engine.start(mail, ref, { round: 1 });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    // The run failed (resumable) an hour ago; it is kept for another hour.
    await db().sql`
      update stepkey.ledger set status = 'failed', last_error = '{"name":"Error","message":"x"}',
             expires_at = now() + interval '1 hour'
       where scope = ${ref.scope} and key = ${ref.key}`;
    // The gate: the sender's message key held uncommitted, so the send — the run's row locked —
    // waits at its insert.
    const gate = await openGate();
    await gate.sql`
      insert into stepkey.mailbox (scope, run_key, topic, sender_key, fingerprint, payload)
      values (${ref.scope}, ${ref.key}, 'note', 'k1', 'gate', '{}')`;
    const sending = engine.send(ref, 'note', { n: 1 }, { key: 'k1' });
    await lockWaiters(1);
    // Time passes: the run has expired; a new request with its key forgets it, waiting for the
    // send's lock on the row.
    engine.clock.advance(2 * 3_600_000);
    const attempting = engine.attempt(mail, ref, { round: 2 });
    await lockWaiters(2);
    await gate.release();
    await expect(sending).resolves.toMatchObject({ delivered: true });
    // The new run is a new request: it waits for an event of its own.
    await expect(attempting).resolves.toMatchObject({ state: 'waiting' });
    expect(await db().sql`select sender_key from stepkey.mailbox where scope = ${ref.scope} and run_key = ${ref.key}`).toEqual([]);
    await engine.shutdown();
  });

  it('refuses a send to a failed run past its expiry: its key is a new request', async () => {
    const engine = testEngine(db(), [mail]);
    const ref = { scope: 'acme', key: uniqueKey('expired-send') };
    await engine.start(mail, ref, { round: 1 });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    await db().sql`
      update stepkey.ledger set status = 'failed', last_error = '{"name":"Error","message":"x"}',
             expires_at = now() - interval '1 second'
       where scope = ${ref.scope} and key = ${ref.key}`;
    await expect(engine.send(ref, 'note', { n: 1 }, { key: 'k1' })).rejects.toMatchObject({ code: 'run_not_found' });
    expect(await db().sql`select 1 from stepkey.mailbox where scope = ${ref.scope} and run_key = ${ref.key}`).toEqual([]);
    await engine.shutdown();
  });
});

describe('a send racing the start of a run', () => {
  let holdPrep: (() => void) | undefined;
  const starter = defineWorkflow({
    name: 'races-start',
    version: 1,
    input: z.object({ round: z.number() }),
    events: { note: z.object({ n: z.number() }) },
    steps: { prep: step('prep.v1', heldStep), note: step('note.v1') },
    async run({ input, steps }) {
      if (input.round === 2) await steps.prep.tx(() => new Promise<void>((resolve) => (holdPrep = resolve)));
      const got = await steps.note.waitForEvent('note');
      return got.payload.n;
    },
  });

  it('delivers to a run whose start commits while the send waits for the row it replaces', async () => {
    const engine = testEngine(db(), [starter]);
    const ref = { scope: 'acme', key: uniqueKey('start-race') };
    await engine.start(starter, ref, { round: 1 });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    expect(await engine.cancel(ref)).toBe(true);
    engine.clock.advance(engine.retentionMs + 60_000);
    // A new request under the expired key: the old row is deleted and the new one inserted in the
    // run's first transaction, held open by its first (tx) step.
    const attempting = engine.attempt(starter, ref, { round: 2 });
    await expect.poll(() => holdPrep !== undefined).toBe(true);
    // The send meets the old row, deleted but not committed: it waits for the start to commit.
    const sending = engine.send(ref, 'note', { n: 7 }, { key: 'k' });
    await lockWaiters(1, 'for no key update');
    holdPrep!();
    await expect(attempting).resolves.toMatchObject({ state: 'waiting' });
    await expect(sending).resolves.toMatchObject({ delivered: true });
    await expect.poll(async () => (await engine.get(ref))?.status).toBe('completed');
    expect(await engine.run(starter, ref, { round: 2 })).toBe(7);
    await engine.shutdown();
  });

  it('delivers to a run whose row committed while the key\'s advisory lock is still held', async () => {
    // A committing start releases its row locks — which wake the send — before its advisory
    // locks. The window is held open here: the run's row is deleted and inserted again by one
    // uncommitted transaction (the send waits for it, then misses the row in its snapshot), and
    // another connection holds the key's advisory lock past that commit.
    const engine = testEngine(db(), [starter]);
    const ref = { scope: 'acme', key: uniqueKey('start-lock-lag') };
    await engine.start(starter, ref, { round: 1 });
    await expect.poll(() => status(ref.scope, ref.key)).toBe('waiting');
    const replace = await openGate();
    const [old] = await replace.sql<{ row: string }[]>`
      delete from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key} returning row_to_json(ledger.*)::text as row`;
    const sending = engine.send(ref, 'note', { n: 7 }, { key: 'k' });
    await lockWaiters(1, 'for no key update');
    const holder = await openGate();
    await holder.sql`select pg_advisory_xact_lock(hashtextextended(${ref.scope} || chr(31) || ${ref.key}, 0))`;
    await replace.sql`insert into stepkey.ledger select * from json_populate_record(null::stepkey.ledger, ${old!.row}::json)`;
    await replace.sql`commit`;
    replace.sql.release();
    await expect(sending).resolves.toMatchObject({ delivered: true });
    await holder.release();
    await expect.poll(() => status(ref.scope, ref.key)).toBe('completed');
    expect(await engine.run(starter, ref, { round: 1 })).toBe(7);
    await engine.shutdown();
  });
});

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
