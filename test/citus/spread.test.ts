/**
 * The Citus stage's last file: a step limit held across scopes (its slots
 * given back on the coordinator, and by a sweep when a run left one); runs
 * (two steps, a sleep, a step) over twenty
 * scopes on a database distributed by scope, then every scoped table that holds them has rows on
 * both workers, and every scoped table is co-located with the ledger (a
 * scope's rows of every table on one node).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { limitHeld } from '../helpers/limits.js';

const db = useTestDatabase();
let engine: Engine;

const threeSteps = defineWorkflow({
  name: 'spread',
  version: 1,
  input: z.object({ n: z.number().int() }),
  output: z.object({ total: z.number() }),
  steps: { a: step('a.v1'), b: step('b.v1'), rest: step('rest.v1'), c: step('c.v1') },
  async run({ input, steps }) {
    const a = await steps.a.tx(async () => input.n);
    const b = await steps.b.call(async () => a + 1);
    // A sleep: the run parks (no lease) and is woken at its time, on its scope's node.
    await steps.rest.sleep(200);
    const c = await steps.c.tx(async () => b + 1);
    return { total: c };
  },
});

beforeAll(() => {
  engine = testEngine(db(), [threeSteps]);
});
afterAll(() => engine.shutdown());

/** Rows of a distributed table per worker port, counted on each shard placement. */
async function rowsByWorker(table: string): Promise<Map<number, number>> {
  const rows = await db().sql<{ port: number; n: string }[]>`
    select nodeport as port, result as n
      from run_command_on_placements(${`stepkey.${table}`}::regclass, 'select count(*) from %s')
     where success`;
  const byPort = new Map<number, number>();
  for (const row of rows) byPort.set(row.port, (byPort.get(row.port) ?? 0) + Number(row.n));
  return byPort;
}

const pair = defineLimit({ name: 'spread-pair', concurrency: 2 });
let inside = 0;
let most = 0;
let called = 0;
const limited = defineWorkflow({
  name: 'spread-limited',
  version: 1,
  input: z.object({}),
  steps: { first: step('first.v1'), call: step('call.v1', { limit: pair }) },
  async run({ steps }) {
    await steps.first.tx(async () => 'ok');
    return steps.call.call(async () => {
      inside += 1;
      most = Math.max(most, inside);
      called += 1;
      // Long enough for other runs to find both slots held and park.
      await new Promise((resolve) => setTimeout(resolve, 30));
      inside -= 1;
      return 'done';
    });
  },
});

describe('stepkey distributed by scope', () => {
  it('holds a step limit across scopes: never more than its concurrency at once, every slot given back', async () => {
    const limitedEngine = testEngine(db(), [limited], { limits: [pair] });
    try {
      const refs = Array.from({ length: 24 }, (_, i) => ({ scope: `tenant-limited-${i % 8}`, key: `limited-${i}` }));
      const results = await Promise.all(refs.map((ref) => limitedEngine.run(limited, ref, {})));
      expect(results).toEqual(refs.map(() => 'done'));
      expect(called).toBe(24);
      expect(most).toBeLessThanOrEqual(2);
      expect(await limitHeld(db().sql, 'spread-pair')).toMatchObject({ held: 0, slots: 0 });
    } finally {
      await limitedEngine.shutdown();
    }
  });

  it('a sweep gives back the slot a run left when it stopped executing', async () => {
    const limitedEngine = testEngine(db(), [limited], { limits: [pair] });
    try {
      const ref = { scope: 'tenant-left', key: 'left-1' };
      await limitedEngine.run(limited, ref, {});
      // As a process killed between its run's end and the coordinator's give-back leaves it.
      await db().sql.begin(async (tx) => {
        await tx`insert into stepkey.limit_slots (scope, key, limit_name, partition, step, token)
                 values (${ref.scope}, ${ref.key}, 'spread-pair', '', 'call.v1', gen_random_uuid())`;
        await tx`update stepkey.limit_partitions set held = held + 1 where limit_name = 'spread-pair' and partition = ''`;
      });
      await limitedEngine.sweep();
      expect(await limitHeld(db().sql, 'spread-pair')).toMatchObject({ held: 0, slots: 0 });
    } finally {
      await limitedEngine.shutdown();
    }
  });

  it('spreads runs over both workers, each scope on one node', async () => {
    const runs = Array.from({ length: 100 }, (_, i) => ({ scope: `tenant-${i % 20}`, key: `spread-${i}` }));
    const results = await Promise.all(runs.map((ref, i) => engine.run(threeSteps, ref, { n: i })));
    expect(results.map((r) => r.total)).toEqual(runs.map((_, i) => i + 2));

    const workers = (process.env.STEPKEY_CITUS_WORKERS ?? '').split(',').map((entry) => Number(entry.split(':')[1]));
    expect(workers).toHaveLength(2);
    for (const table of ['ledger', 'steps', 'step_attempts']) {
      const byPort = await rowsByWorker(table);
      for (const port of workers) expect(byPort.get(port) ?? 0, `${table} on :${port}`).toBeGreaterThan(0);
    }
    const [counts] = await db().sql<{ ledger: number; steps: number }[]>`
      select (select count(*)::int from stepkey.ledger where kind = 'run' and key like 'spread-%') as ledger,
             (select count(*)::int from stepkey.steps where run_key like 'spread-%') as steps`;
    expect(counts).toEqual({ ledger: 100, steps: 400 });
    const groups = await db().sql<{ colocationid: number }[]>`
      select distinct colocationid from pg_dist_partition where logicalrelid::regclass::text like 'stepkey.%'`;
    expect(groups).toHaveLength(1);
  });
});
