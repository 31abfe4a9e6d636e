/**
 * The flow mark (migration 0011): a run that takes no limit and is not
 * enqueued is marked false; a queued or limited run is marked true. Whatever
 * a run is marked, its end gives back the queue entry and the limit slots it
 * holds (lifecycle/holds.ts) — a slot or an entry written for a row marked
 * false (an older release's, or a definition that gained a limit under the
 * same version) included. Runs written before the migration resume after it.
 */
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { newRootKey } from '../../src/keys/derive.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useEmptyDatabase, useTestDatabase, type TestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { gates, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';
import { limitHeld } from '../helpers/limits.js';
import { migrateBefore } from '../helpers/migrations.js';

const db = useTestDatabase();
const { gate, openAll, clear } = gates();

const single = defineLimit({ name: 'mark-single', concurrency: 1 });
const queue = defineQueue({ name: 'mark-queue', concurrency: 4 });

/** No limit: its runs are marked false unless enqueued. It waits at its gate inside its second step. */
const plain = defineWorkflow({
  name: 'mark-plain',
  version: 1,
  input: z.object({ id: z.string() }),
  // Held at a gate the test opens: no attempt timeout cuts it first, however long a busy host takes.
  steps: { first: step('first.v1'), held: step('held.v1', { timeoutMs: LONG_LEASE_MS }) },
  async run({ input, steps }) {
    await steps.first.tx(async () => 'ok');
    await steps.held.call(async () => {
      await gate(input.id).opened;
      return 'ok';
    });
    return input.id;
  },
});

const limited = defineWorkflow({
  name: 'mark-limited',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { only: step('only.v1', { limit: single }) },
  async run({ input, steps }) {
    return steps.only.call(async () => input.id);
  },
});

const engines: Engine[] = [];
const engine = (database: TestDatabase = db()) => {
  const made = testEngine(database, [plain, limited], { queues: [queue], limits: [single] });
  engines.push(made);
  return made;
};

afterEach(async () => {
  openAll();
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
  clear();
});

async function flowOf(sql: Sql, ref: KeyRef): Promise<boolean | undefined> {
  const [row] = await sql<{ flow: boolean }[]>`select flow from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
  return row?.flow;
}

/** A limit slot taken for the run the way an acquire writes one (the partition's counter and the slot's row). */
async function takeSlot(sql: Sql, ref: KeyRef, limit: string): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`
      insert into stepkey.limit_partitions as p (limit_name, partition, held, tokens, refilled_at, granted)
      values (${limit}, '', 1, 0, now(), 1)
      on conflict (limit_name, partition) do update set held = p.held + 1, granted = p.granted + 1`;
    await tx`
      insert into stepkey.limit_slots (scope, key, limit_name, partition, step, token, granted_at)
      values (${ref.scope}, ${ref.key}, ${limit}, '', 'held.v1', gen_random_uuid(), now())`;
  });
}

describe('the flow mark', () => {
  it('is false for a run that takes no limit and is not enqueued, true for a queued or a limited run', async () => {
    const e = engine();
    const sql = db().sql;
    const bare = { scope: 'acme', key: uniqueKey('mark-bare') };
    gate(bare.key).open();
    await e.run(plain, bare, { id: bare.key });
    expect(await flowOf(sql, bare)).toBe(false);

    const queued = { scope: 'acme', key: uniqueKey('mark-queued') };
    gate(queued.key).open();
    const handle = await e.enqueue(plain, queued, { id: queued.key }, { queue });
    expect(await handle.result()).toBe(queued.key);
    expect(await flowOf(sql, queued)).toBe(true);
    expect((await slotsHeld(sql, 'mark-queue')).entries).toBe(0);

    const metered = { scope: 'acme', key: uniqueKey('mark-limited') };
    await e.run(limited, metered, { id: metered.key });
    expect(await flowOf(sql, metered)).toBe(true);
    expect(await limitHeld(sql, 'mark-single')).toMatchObject({ held: 0, slots: 0 });
  });

  it('does not keep a limit slot or a queue entry written for a run marked false: that run’s end gives them back', async () => {
    const e = engine();
    const sql = db().sql;
    const ref = { scope: 'acme', key: uniqueKey('mark-late') };
    const running = e.run(plain, ref, { id: ref.key });
    await expect.poll(() => flowOf(sql, ref)).toBe(false);
    // As a process whose definition of this workflow takes a limit would, and a queue's entry.
    await takeSlot(sql, ref, 'mark-single');
    await sql`
      insert into stepkey.queue_entries (scope, key, queue, partition, holding, granted_at)
      values (${ref.scope}, ${ref.key}, 'mark-queue', '', true, now())`;
    expect(await limitHeld(sql, 'mark-single')).toMatchObject({ held: 1, slots: 1 });

    gate(ref.key).open();
    expect(await running).toBe(ref.key);
    expect(await limitHeld(sql, 'mark-single')).toMatchObject({ held: 0, slots: 0 });
    expect(await slotsHeld(sql, 'mark-queue')).toEqual({ held: 0, entries: 0 });
  });

  it('does not keep a slot left from an earlier run of the key and taken again (its ON CONFLICT update): that run’s end gives it back', async () => {
    const e = engine();
    const sql = db().sql;
    const ref = { scope: 'acme', key: uniqueKey('mark-left') };
    // A slot row whose run's row is gone: nothing to mark.
    await takeSlot(sql, ref, 'mark-single');
    expect(await flowOf(sql, ref)).toBeUndefined();
    const running = e.run(plain, ref, { id: ref.key });
    await expect.poll(() => flowOf(sql, ref)).toBe(false);
    // Taken again for the new run, the way an acquire takes a slot it already has a row for.
    await sql`
      insert into stepkey.limit_slots as l (scope, key, limit_name, partition, step, token, granted_at)
      values (${ref.scope}, ${ref.key}, 'mark-single', '', 'held.v1', gen_random_uuid(), now())
      on conflict (scope, key, limit_name, partition) do update set token = excluded.token, granted_at = excluded.granted_at`;
    gate(ref.key).open();
    expect(await running).toBe(ref.key);
    expect(await limitHeld(sql, 'mark-single')).toMatchObject({ held: 0, slots: 0 });
  });
});

describe('an upgrade to migration 0011', () => {
  const empty = useEmptyDatabase('mark_upgrade');

  it('keeps the triggers of runs written before it: a run in flight resumes and ends, a cancelled one gives its slot back', async () => {
    const url = await empty();

    await migrateBefore(url, '0011');

    // Written by the previous release: a run in flight whose process died (its lease expired),
    // and a run holding a limit slot.
    const inFlight = { scope: 'acme', key: uniqueKey('mark-up-flight') };
    const holder = { scope: 'acme', key: uniqueKey('mark-up-holder') };
    const old = postgres(url, { max: 1, onnotice: () => {} });
    try {
      for (const [ref, workflow] of [[inFlight, 'mark-plain'], [holder, 'mark-limited']] as const) {
        await old`
          insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, lease_token, locked_until, attempts,
                                      version, input, root_key, created_at, updated_at)
          values (${ref.scope}, ${ref.key}, 'run', ${workflow}, 'fp-before-0011', 'in_progress', gen_random_uuid(),
                  now() - interval '1 minute', 1, 1, ${JSON.stringify({ id: ref.key })}, ${newRootKey(ref.scope, ref.key)},
                  now(), now())`;
      }
      await old`insert into stepkey.limits (name, concurrency) values ('mark-single', 1)`;
      await takeSlot(old as unknown as Sql, holder, 'mark-single');
    } finally {
      await old.end();
    }

    await migrate(url);
    const upgraded: Database & { name: string } = Object.assign(connect(url, { max: 5 }), { name: 'mark_upgrade' });
    try {
      expect(await flowOf(upgraded.sql, inFlight)).toBe(true);
      expect(await flowOf(upgraded.sql, holder)).toBe(true);
      const e = engine(upgraded as TestDatabase);
      expect(await e.cancel(holder, 'test')).toBe(true);
      expect(await limitHeld(upgraded.sql, 'mark-single')).toMatchObject({ held: 0, slots: 0 });

      gate(inFlight.key).open();
      await e.sweep();
      await waitForRunsToEnd(upgraded.sql, inFlight.key);
      const [row] = await upgraded.sql<{ status: string; outcome: string }[]>`
        select status, outcome from stepkey.ledger where scope = ${inFlight.scope} and key = ${inFlight.key}`;
      expect(row).toEqual({ status: 'completed', outcome: JSON.stringify(inFlight.key) });
    } finally {
      await Promise.all(engines.splice(0).map((made) => made.shutdown({ timeoutMs: 5_000 })));
      await upgraded.close();
    }
  });
});
