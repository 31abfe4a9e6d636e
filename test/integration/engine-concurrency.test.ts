/**
 * Workflow code that does more than await one step after another: steps
 * started together, a step inside a step, a step after the run ended, a
 * failed commit caught by workflow code, a first step that outlasts the
 * lease — and many readers of a completed run.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Clock } from '../../src/db/clock.js';
import { childKey } from '../../src/keys/derive.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 30 });

beforeAll(async () => {
  await db().sql`create table writes (run_key text not null, step text not null)`;
});

const writesOf = async (root: string) =>
  (await db().sql<{ step: string }[]>`select step from writes where run_key = ${root} order by step`).map((r) => r.step);
const openTransactions = async () =>
  (await db().sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`)[0]!.n as number;

describe('steps started together', () => {
  it('run one at a time and all commit; nothing is left open', async () => {
    const together = defineWorkflow({
      name: 'together',
      version: 1,
      input: z.object({}),
      steps: { first: step('first.v1'), a: step('a.v1'), b: step('b.v1') },
      async run({ steps, ctx }) {
        await steps.first.call(async () => 0);
        const write = (name: string, delay: number) => async (_db: unknown, { sql }: { sql: import('../../src/db/transaction.js').TxSql }) => {
          await sleep(delay);
          await sql`insert into writes (run_key, step) values (${ctx.rootKey}, ${name})`;
          return name;
        };
        return Promise.all([steps.a.tx(write('a', 30)), steps.b.tx(write('b', 0))]);
      },
    });
    const engine = testEngine(db(), [together]);
    const ref = { scope: 'acme', key: uniqueKey('together') };
    expect(await engine.run(together, ref, {})).toEqual(['a', 'b']);
    expect(await writesOf(await storedRoot(db(), ref))).toEqual(['a', 'b']);
    expect((await engine.get(ref))!.steps.map((s) => s.name).sort()).toEqual(['a.v1', 'b.v1', 'first.v1']);
    await expect.poll(openTransactions).toBe(0);
    await engine.shutdown();
  });

  it('refuse a step inside a step, and a step after the run ended', async () => {
    let late: Promise<unknown> | undefined;
    const nested = defineWorkflow({
      name: 'nested',
      version: 1,
      input: z.object({ late: z.boolean() }),
      steps: { outer: step('outer.v1'), inner: step('inner.v1') },
      async run({ input, steps }) {
        if (input.late) {
          setTimeout(() => {
            late = steps.inner.call(async () => 1);
            late.catch(() => {});
          }, 50);
          return 'ended';
        }
        return steps.outer.call(async () => steps.inner.call(async () => 1));
      },
    });
    const engine = testEngine(db(), [nested]);
    const error = await engine.run(nested, { scope: 'acme', key: uniqueKey('nested') }, { late: false }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/Step 'inner.v1' was called inside another step of the same run; steps cannot be nested/);
    expect(await engine.run(nested, { scope: 'acme', key: uniqueKey('late') }, { late: true })).toBe('ended');
    await expect.poll(() => late !== undefined).toBe(true);
    await expect(late).rejects.toThrow(/was called after its run ended/);
    await engine.shutdown();
  });

  it('refuse a step called inside a tx step after its function awaited, and let a step started alongside one run after it', async () => {
    const later = defineWorkflow({
      name: 'nested-later',
      version: 1,
      input: z.object({ alongside: z.boolean() }),
      steps: { outer: step('outer.v1'), inner: step('inner.v1') },
      async run({ input, steps }) {
        if (input.alongside) {
          // Started while the first one's function runs, from workflow code: it waits its turn.
          const first = steps.outer.tx(async (_db, { sql }) => {
            await sql`select pg_sleep(0.05)`;
            return 'outer';
          });
          await sleep(10);
          return [await first, await steps.inner.tx(async () => 'inner')];
        }
        return steps.outer.tx(async (_db, { sql }) => {
          await sql`select 1`;
          await Promise.all([1].map(async () => steps.inner.tx(async () => 1)));
        });
      },
    });
    const engine = testEngine(db(), [later]);
    const error = await engine.run(later, { scope: 'acme', key: uniqueKey('nested-later') }, { alongside: false }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/Step 'inner.v1' was called inside another step of the same run; steps cannot be nested/);
    expect(await engine.run(later, { scope: 'acme', key: uniqueKey('alongside') }, { alongside: true })).toEqual(['outer', 'inner']);
    await expect.poll(openTransactions).toBe(0);
    await engine.shutdown();
  });
});

describe('a failed commit', () => {
  it('halts the run even when workflow code catches the error: the lost step is done again on resume', async () => {
    let terminate = true;
    const fragile = defineWorkflow({
      name: 'fragile',
      version: 1,
      input: z.object({}),
      steps: { a: step('a.v1'), b: step('b.v1') },
      async run({ steps, ctx }) {
        let backend = 0;
        await steps.a.tx(async (_db, { sql }) => {
          [{ pid: backend }] = (await sql`select pg_backend_pid() as pid`) as unknown as [{ pid: number }];
          await sql`insert into writes (run_key, step) values (${ctx.rootKey}, 'a')`;
        });
        if (terminate) {
          // The connection of step a's still uncommitted transaction goes away (a failover).
          terminate = false;
          const killer = postgres(db().url, { max: 1, onnotice: () => {} });
          await killer`select pg_terminate_backend(${backend})`;
          await killer.end();
          await sleep(50);
        }
        try {
          await steps.b.call(async () => 'b');
        } catch {
          // Workflow code that swallows errors must not make a lost step look done.
        }
        return 'done';
      },
    });
    const engine = testEngine(db(), [fragile]);
    const ref = { scope: 'acme', key: uniqueKey('fragile') };
    expect(await engine.run(fragile, ref, {})).toBe('done');
    const root = await storedRoot(db(), ref);
    expect(await writesOf(root)).toEqual(['a']);
    const steps = await db().sql`select name from stepkey.steps where scope = ${ref.scope} and run_key = ${ref.key} order by name`;
    expect(steps.map((s) => s.name)).toEqual(['a.v1', 'b.v1']);
    await engine.shutdown();
  });
});

describe('leases', () => {
  it('give a first step that outlasts the lease a fresh lease when the run starts', async () => {
    // One clock for both processes; the first step, whose transaction carries the run's start, takes
    // longer than a lease (the clock is moved while it runs), and no heartbeat covers an uncommitted row.
    const clock = new Clock();
    const calls: string[] = [];
    const swept: number[] = [];
    const slowStart = defineWorkflow({
      name: 'slow-start',
      version: 1,
      input: z.object({}),
      steps: { a: step('a.v1'), c: step('c.v1') },
      async run({ steps }) {
        await steps.a.tx(async (_db, { sql }) => {
          clock.advance(LONG_LEASE_MS + 60_000);
          await sql`select 1`;
        });
        await steps.c.call(async () => {
          calls.push('c');
          // A sweep while the run works on: its lease, renewed when the start committed, still holds.
          swept.push(await sweeper.sweep());
        });
        return 'done';
      },
    });
    const runner = testEngine(db(), [slowStart], { clock });
    const sweeper = testEngine(db(), [slowStart], { clock });
    const ref = { scope: 'acme', key: uniqueKey('slow-start') };
    expect(await runner.attempt(slowStart, ref, {})).toMatchObject({ state: 'completed', replayed: false });
    expect(swept).toEqual([0]);
    expect(calls).toEqual(['c']);
    await runner.shutdown();
    await sweeper.shutdown();
  });
});

describe('readers of a completed run', () => {
  it('all get the replay, none is told "in progress"', async () => {
    const quick = defineWorkflow({
      name: 'quick',
      version: 1,
      input: z.object({}),
      steps: { a: step('a.v1') },
      async run({ steps }) {
        return steps.a.tx(async () => 'value');
      },
    });
    const engine = testEngine(db(), [quick]);
    const ref = { scope: 'acme', key: uniqueKey('read') };
    await engine.run(quick, ref, {});
    const attempts = await Promise.all(Array.from({ length: 100 }, () => engine.attempt(quick, ref, {})));
    expect(new Set(attempts.map((a) => a.state))).toEqual(new Set(['completed']));
    expect(childKey(await storedRoot(db(), ref), 'a.v1')).toMatch(/^[0-9a-f]{64}$/);
    await engine.shutdown();
  });
});
