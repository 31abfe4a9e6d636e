/**
 * A queued run written by an earlier release, after an upgrade: an entry
 * written before migration 0009 is dispatched, fails, keeps its entry and
 * resumes into a slot; a run failed before migration 0014 (which moved the
 * park from a trigger into the resuming writes) resumes into a slot after
 * it, and a run in flight before it ends. Never two runs in the queue's one
 * slot at once.
 */
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { newRootKey } from '../../src/keys/derive.js';
import { useEmptyDatabase, useTestDatabase } from '../helpers/database.js';
import { createIntervals, maxOverlap, readIntervals, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { migrateBefore } from '../helpers/migrations.js';
import { enqueueFingerprint, requeueFixture, runStatus } from '../helpers/requeue.js';

const db = useTestDatabase();
const { flaky, single, gate, openAll, failing, prepared, worked, engines, engine, recordIn } = requeueFixture(db);
const status = runStatus;

beforeAll(async () => {
  await createIntervals(db().sql);
});
afterEach(async () => {
  openAll();
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
});

describe('an upgrade to migration 0014', () => {
  const empty = useEmptyDatabase('requeue_upgrade_0014');
  afterAll(() => {
    recordIn();
  });

  it('resumes a queued run that failed before it into a slot, and a run in flight before it ends', async () => {
    const url = await empty();
    // stepkey's migrations up to 0013: the ledger still has the trigger that parked a resumed run.
    await migrateBefore(url, '0014');
    const ref = { scope: 'acme', key: uniqueKey('rq-up14') };
    const inFlight = { scope: 'acme', key: `${ref.key}-in-flight` };
    // Written by the previous release: a queued run that failed (its entry marked failed, as its
    // trigger marked it), and a queued run holding the slot whose process died at its gate.
    const old = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await old`insert into stepkey.queues (name, concurrency) values ('rq-single', 1)`;
      const input = { id: ref.key, hold: false };
      await old`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, attempts, version, input, root_key, last_error,
                                    expires_at, created_at, updated_at)
        values (${ref.scope}, ${ref.key}, 'run', 'rq-flaky', ${enqueueFingerprint(input)}, 'failed', 1, 1, ${JSON.stringify(input)},
                ${newRootKey(ref.scope, ref.key)}, '{"name":"Error","message":"provider down"}', now() + interval '1 day', now(), now())`;
      await old`insert into stepkey.queue_entries (scope, key, queue, partition, failed) values (${ref.scope}, ${ref.key}, 'rq-single', '', true)`;
      const holdInput = { id: inFlight.key, hold: true };
      await old`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, lease_token, locked_until, attempts, version, input,
                                    root_key, created_at, updated_at)
        values (${inFlight.scope}, ${inFlight.key}, 'run', 'rq-flaky', ${enqueueFingerprint(holdInput)}, 'in_progress', gen_random_uuid(),
                now() - interval '1 minute', 1, 1, ${JSON.stringify(holdInput)}, ${newRootKey(inFlight.scope, inFlight.key)}, now(), now())`;
      await old`
        insert into stepkey.queue_entries (scope, key, queue, partition, holding, granted_at)
        values (${inFlight.scope}, ${inFlight.key}, 'rq-single', '', true, now())`;
    } finally {
      await old.end();
    }

    await migrate(url);
    const upgraded = Object.assign(connect(url, { max: 5 }), { name: 'requeue_upgrade_0014' });
    recordIn(() => upgraded);
    try {
      await createIntervals(upgraded.sql);
      const e = engine(upgraded);
      expect(await e.resume(ref)).toMatchObject({ state: 'waiting', wait: { kind: 'slot' } });
      expect(await status(upgraded.sql, ref)).toEqual({ status: 'waiting', wait_kind: 'slot', lease_token: null });
      // The run in flight is taken over; once it ends, the resumed run gets the slot.
      gate(inFlight.key).open();
      await e.sweep();
      await waitForRunsToEnd(upgraded.sql, ref.key);
      expect(await status(upgraded.sql, ref)).toMatchObject({ status: 'completed' });
      expect(await status(upgraded.sql, inFlight)).toMatchObject({ status: 'completed' });
      expect(prepared.get(ref.key)).toBe(1);
      expect(worked.get(ref.key)).toBe(1);
      // Both runs' intervals (the run in flight's key starts with the resumed run's): never two at once.
      expect(maxOverlap(await readIntervals(upgraded.sql, ref.key)).overall).toBe(1);
      expect(await slotsHeld(upgraded.sql, 'rq-single')).toEqual({ held: 0, entries: 0 });
    } finally {
      await Promise.all(engines.splice(0).map((made) => made.shutdown({ timeoutMs: 5_000 })));
      await upgraded.close();
      recordIn();
    }
  });
});

describe('an upgrade to migration 0009', () => {
  let url = '';
  const empty = useEmptyDatabase('requeue_upgrade');
  afterAll(() => {
    recordIn();
  });

  it('keeps queue entries written before it: dispatched, failed, resumed into a slot', async () => {
    url = await empty();

    // stepkey's migrations up to 0008.
    await migrateBefore(url, '0009');
    const old = postgres(url, { max: 1, onnotice: () => {} });
    try {
      // A run queued by the previous release: parked for a slot, and its entry.
      const ref = { scope: 'acme', key: uniqueKey('rq-upgrade') };
      await old`insert into stepkey.queues (name, concurrency) values ('rq-single', 1)`;
      await old`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, attempts, version, input, root_key,
                                    wait_kind, wait_step, wait_for, created_at, updated_at)
        values (${ref.scope}, ${ref.key}, 'run', 'rq-flaky', 'fp-before-0009', 'waiting', 1, 1,
                ${JSON.stringify({ id: ref.key, hold: false })}, ${newRootKey(ref.scope, ref.key)},
                'slot', 'queue:rq-single', 'rq-single', now(), now())`;
      await old`insert into stepkey.queue_entries (scope, key, queue, partition) values (${ref.scope}, ${ref.key}, 'rq-single', '')`;
      await old.end();

      await migrate(url);
      const upgraded = Object.assign(connect(url, { max: 5 }), { name: 'requeue_upgrade' });
      recordIn(() => upgraded);
      try {
        await createIntervals(upgraded.sql);
        expect(await slotsHeld(upgraded.sql, 'rq-single')).toEqual({ held: 0, entries: 1 });
        failing.add(ref.key);
        const e = engine(upgraded);
        // Dispatched like any queued run; it fails, keeps its entry, holds no slot.
        await e.sweep();
        await expect.poll(async () => (await status(upgraded.sql, ref))?.status).toBe('failed');
        expect(await slotsHeld(upgraded.sql, 'rq-single')).toEqual({ held: 0, entries: 1 });
        // Another run holds the slot; the resumed run waits for it.
        const holder = { scope: 'acme', key: `${ref.key}-holder` };
        await e.enqueue(flaky, holder, { id: holder.key, hold: true }, { queue: single });
        await expect.poll(async () => (await readIntervals(upgraded.sql, holder.key)).length).toBe(1);
        failing.delete(ref.key);
        expect(await e.resume(ref)).toMatchObject({ state: 'waiting', wait: { kind: 'slot' } });
        expect(await status(upgraded.sql, ref)).toEqual({ status: 'waiting', wait_kind: 'slot', lease_token: null });
        gate(holder.key).open();
        await waitForRunsToEnd(upgraded.sql, ref.key);
        expect(await status(upgraded.sql, ref)).toMatchObject({ status: 'completed' });
        expect(maxOverlap(await readIntervals(upgraded.sql, ref.key)).overall).toBe(1);
        expect(await slotsHeld(upgraded.sql, 'rq-single')).toEqual({ held: 0, entries: 0 });
      } finally {
        await Promise.all(engines.splice(0).map((engine) => engine.shutdown({ timeoutMs: 5_000 })));
        await upgraded.close();
      }
    } finally {
      await old.end().catch(() => {});
    }
  });
});
