/**
 * An upgrade to migration 0013, which moves a run's finished steps from the
 * ledger to stepkey.steps: a run in flight whose steps an earlier release
 * recorded resumes after it from its last finished step (no finished step
 * runs again), a finished run keeps its steps (its record, a rerun from one
 * of them), and a process of the earlier release that is still running
 * cannot record a step where this release would not look: its step's
 * transaction fails, its business write with it.
 */
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { childKey, newRootKey } from '../../src/keys/derive.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useEmptyDatabase, type TestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { migrateBefore } from '../helpers/migrations.js';

const executed: string[] = [];

const three = defineWorkflow({
  name: 'upgrade-three',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { a: step('a.v1', { output: z.string() }), b: step('b.v1', { output: z.string() }), c: step('c.v1', { output: z.string() }) },
  async run({ input, steps }) {
    const a = await steps.a.tx(async (_db, { sql }) => {
      executed.push(`${input.id}:a`);
      await sql`insert into upgrade_writes (id) values (${`${input.id}:a`})`;
      return 'a-now';
    });
    const b = await steps.b.tx(async (_db, { sql }) => {
      executed.push(`${input.id}:b`);
      await sql`insert into upgrade_writes (id) values (${`${input.id}:b`})`;
      return 'b-now';
    });
    const c = await steps.c.tx(async () => {
      executed.push(`${input.id}:c`);
      return 'c-now';
    });
    return [a, b, c].join(' ');
  },
});

const engines: Engine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((made) => made.shutdown({ timeoutMs: 5_000 })));
});

/** A run row and its finished steps as the release before migration 0013 wrote them (steps in the ledger). */
async function writtenBefore(sql: postgres.Sql, ref: KeyRef, status: 'in_progress' | 'completed', steps: Record<string, string>) {
  const root = newRootKey(ref.scope, ref.key);
  const finished = status === 'completed';
  await sql`
    insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, outcome, outcome_ok, lease_token, locked_until,
                                attempts, version, input, root_key, expires_at, created_at, updated_at, completed_at)
    values (${ref.scope}, ${ref.key}, 'run', 'upgrade-three', 'fp-before-0013', ${status},
            ${finished ? JSON.stringify('a-then b-then c-then') : null}, ${finished ? true : null},
            ${finished ? null : '00000000-0000-4000-8000-000000000013'}::uuid, ${finished ? null : sql`now() - interval '1 minute'`},
            1, 1, ${JSON.stringify({ id: ref.key })}, ${root}, ${finished ? sql`now() + interval '1 day'` : null},
            now(), now(), ${finished ? sql`now()` : null})`;
  let seq = 0;
  for (const [name, output] of Object.entries(steps)) {
    await sql`
      insert into stepkey.ledger (scope, key, kind, name, parent_key, fingerprint, status, outcome, outcome_ok, attempts, seq,
                                  created_at, updated_at, completed_at)
      values (${ref.scope}, ${childKey(root, name)}, 'step', ${name}, ${ref.key}, ${name}, 'completed', ${JSON.stringify(output)}, true,
              1, ${seq}, now(), now(), now())`;
    seq += 1;
  }
  return root;
}

describe('an upgrade to migration 0013', () => {
  const empty = useEmptyDatabase('step_rows_upgrade');

  it('moves every finished step: runs in flight resume from their last step, finished runs keep their record, an earlier release cannot record a step', async () => {
    const url = await empty();
    await migrateBefore(url, '0013');

    const inFlight = { scope: 'acme', key: uniqueKey('up-flight') };
    const finished = { scope: 'acme', key: uniqueKey('up-done') };
    const old = postgres(url, { max: 1, onnotice: () => {} });
    let flightRoot: string;
    try {
      await old`create table upgrade_writes (id text primary key)`;
      // In flight when its process died: step a recorded (its business write with it), b and c not.
      flightRoot = await writtenBefore(old, inFlight, 'in_progress', { 'a.v1': 'a-then' });
      await old`insert into upgrade_writes (id) values (${`${inFlight.key}:a`})`;
      await writtenBefore(old, finished, 'completed', { 'a.v1': 'a-then', 'b.v1': 'b-then', 'c.v1': 'c-then' });
    } finally {
      await old.end();
    }

    await migrate(url);
    const upgraded: TestDatabase = Object.assign(connect(url, { max: 5 }), { name: 'step_rows_upgrade' }) satisfies Database;
    try {
      const sql = upgraded.sql;
      const [left] = await sql<{ n: number }[]>`select count(*)::int as n from stepkey.ledger where kind = 'step'`;
      expect(left!.n).toBe(0);
      const moved = await sql<{ run_key: string; name: string; outcome: string; seq: number }[]>`
        select run_key, name, outcome, seq from stepkey.steps order by run_key, seq`;
      expect(moved.filter((row) => row.run_key === finished.key).map((row) => [row.name, row.outcome, row.seq])).toEqual([
        ['a.v1', '"a-then"', 0],
        ['b.v1', '"b-then"', 1],
        ['c.v1', '"c-then"', 2],
      ]);
      expect(moved.filter((row) => row.run_key === inFlight.key).map((row) => row.name)).toEqual(['a.v1']);

      const engine = testEngine(upgraded, [three]);
      engines.push(engine);
      // The finished run's record reads as before: its steps, under their keys.
      const info = (await engine.get(finished))!;
      expect(info.steps.map((s) => [s.name, s.output])).toEqual([
        ['a.v1', '"a-then"'],
        ['b.v1', '"b-then"'],
        ['c.v1', '"c-then"'],
      ]);

      // The run in flight resumes from b: a replays what the earlier release recorded.
      expect(await engine.sweep()).toBe(1);
      await expect
        .poll(async () => (await sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${inFlight.scope} and key = ${inFlight.key}`)[0]?.status)
        .toBe('completed');
      const [done] = await sql<{ outcome: string }[]>`select outcome from stepkey.ledger where scope = ${inFlight.scope} and key = ${inFlight.key}`;
      expect(JSON.parse(done!.outcome)).toBe('a-then b-now c-now');
      expect(executed.filter((e) => e.startsWith(inFlight.key))).toEqual([`${inFlight.key}:b`, `${inFlight.key}:c`]);
      expect((await sql`select id from upgrade_writes where id like ${`${inFlight.key}:%`} order by id`).map((r) => r.id)).toEqual([
        `${inFlight.key}:a`,
        `${inFlight.key}:b`,
      ]);

      // A rerun from b takes a from the moved record.
      const rerunKey = uniqueKey('up-rerun');
      const rerun = await engine.rerun({ workflow: three, ...finished }, { from: 'b.v1', key: rerunKey });
      expect(await rerun.result()).toBe('a-then b-now c-now');

      // A process of the earlier release records a step the way it did: refused, and its business write with it.
      const earlier = postgres(url, { max: 1, onnotice: () => {} });
      try {
        const failed = await earlier
          .begin(async (tx) => {
            await tx`insert into upgrade_writes (id) values ('earlier-release')`;
            await tx`
              insert into stepkey.ledger (scope, key, kind, name, parent_key, fingerprint, status, outcome, outcome_ok, attempts, seq,
                                          created_at, updated_at, completed_at)
              values (${inFlight.scope}, ${childKey(flightRoot, 'b.v1')}, 'step', 'b.v1', ${inFlight.key}, 'b.v1', 'completed', '"b-then"', true,
                      1, 1, now(), now(), now())`;
          })
          .catch((error: unknown) => error);
        expect(failed).toMatchObject({ code: '23514', constraint_name: 'ledger_row_check' });
        expect((failed as Error).message).toMatch(/steps are recorded in stepkey.steps since migration 0013; a process of an earlier stepkey is still running/);
        expect(await sql`select 1 from upgrade_writes where id = 'earlier-release'`).toHaveLength(0);
      } finally {
        await earlier.end();
      }
    } finally {
      await Promise.all(engines.splice(0).map((made) => made.shutdown({ timeoutMs: 5_000 })));
      await upgraded.close();
    }
  });
});
