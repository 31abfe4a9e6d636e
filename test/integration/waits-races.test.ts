/**
 * Races around runs that wait, each interleaved by hand on real Postgres: a
 * test connection holds an uncommitted row that a statement of stepkey's must
 * wait for (a gate), pg_stat_activity shows who waits on a lock, and the gate
 * is let go only once every contender is where the race needs it. Covered: a
 * cancel racing a park on a new child; deadlocks between a cancel and a
 * child's end (each side the victim); a send racing a park, the forgetting of
 * an expired run and the start of a new one under its key. Children and
 * timers: waits-races-children.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { childKey } from '../../src/keys/derive.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { heldStep, raceKit } from '../helpers/races.js';

const db = useTestDatabase({ max: 20 });
const { lockWaiters, deadlocks, openGate, status } = raceKit(db);

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
