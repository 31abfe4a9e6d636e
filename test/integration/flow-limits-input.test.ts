/**
 * Step limits given bad input: a bad limit, a bad step option, a step naming
 * a limit the engine does not register, and a partitionBy that throws or
 * returns no string — each refused with an error that says what was wrong,
 * and nothing taken or stored.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { createEngine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { limitHeld, runRow } from '../helpers/limits.js';
import { expectRefused } from '../helpers/refused.js';

const db = useTestDatabase();

const pair = defineLimit({ name: 'lim-pair', concurrency: 2 });
const engines: Engine[] = [];

afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
});

describe('bad input', () => {
  const refused = expectRefused;

  it('refuses a bad limit, a bad step option and a step naming a limit the engine does not register', async () => {
    refused(() => defineLimit({ name: 'x', concurrency: 0 }), /Limit 'x': concurrency must be a whole number above 0, got 0/);
    refused(() => defineLimit({ name: 'x', concurrency: -3 }), /concurrency must be a whole number above 0, got -3/);
    refused(() => defineLimit({ name: 'x', concurrency: 1.5 }), /concurrency must be a whole number above 0, got 1.5/);
    refused(() => defineLimit({ name: 'x', rateLimit: { limit: 0, periodMs: 1000 } }), /rateLimit.limit must be a whole number above 0, got 0/);
    refused(() => defineLimit({ name: 'x', rateLimit: { limit: 10, periodMs: 0 } }), /rateLimit.periodMs must be a whole number above 0, got 0/);
    refused(() => defineLimit({ name: 'x', rateLimit: { limit: 10, periodMs: -1 } }), /rateLimit.periodMs must be a whole number above 0, got -1/);
    refused(() => defineLimit({ name: 'x' }), /give it a rateLimit/);
    refused(() => defineLimit({ name: '', concurrency: 1 }), /the name must be/);
    refused(() => defineLimit({ name: 'x', partitionBy: 'tenant' as never, perPartition: { concurrency: 1 } }), /partitionBy must be a function/);
    refused(() => step('s.v1', { limit: 42 as never }), /Step 's.v1': limit must be a limit made with defineLimit\(\) or its name/);
    const named = defineWorkflow({
      name: 'lim-unregistered',
      version: 1,
      input: z.object({}),
      steps: { s: step('unregistered.v1', { limit: 'no-such-limit' }) },
      async run() {},
    });
    refused(
      () => createEngine({ database: db(), workflows: [named], limits: [pair] }),
      /Step 'unregistered.v1' of workflow 'lim-unregistered' v1 names limit 'no-such-limit', which this engine does not register \(registered: lim-pair\)/,
    );
    refused(
      () => createEngine({ database: db(), workflows: [], limits: [pair, defineLimit({ name: 'lim-pair', concurrency: 3 })] }),
      /Limit 'lim-pair' is registered twice with different definitions/,
    );
    const [row] = await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.limits where name = 'no-such-limit'`;
    expect(row!.n).toBe(0);
  });

  it('fails the run — resumable, nothing taken or stored — when partitionBy throws or returns no string', async () => {
    const throwing = defineLimit<{ account?: string }>({
      name: 'lim-bad-partition',
      partitionBy: (input) => {
        if (input.account === undefined) throw new Error('no account');
        return 42 as never;
      },
      perPartition: { concurrency: 1 },
    });
    const wf = defineWorkflow({
      name: 'lim-bad-partition-wf',
      version: 1,
      input: z.object({ account: z.string().optional() }),
      steps: { s: step('bad-partition.v1', { limit: throwing }) },
      async run({ steps }) {
        return steps.s.call(async () => 1);
      },
    });
    const e = testEngine(db(), [wf]);
    engines.push(e);
    const threw = { scope: 'acme', key: uniqueKey('bad-partition-throws') };
    await expect(e.run(wf, threw, {})).rejects.toThrow(/Limit 'lim-bad-partition' \(step 'bad-partition.v1'\): partitionBy threw: no account/);
    const number = { scope: 'acme', key: uniqueKey('bad-partition-number') };
    await expect(e.run(wf, number, { account: 'a' })).rejects.toThrow(/partitionBy must return a non-empty string of at most 256 characters, got number/);
    for (const ref of [threw, number]) expect((await runRow(db().sql, ref))?.status).toBe('failed');
    const [steps] = await db().sql<{ n: number }[]>`
      select count(*)::int as n from stepkey.steps where scope = 'acme' and name = 'bad-partition.v1'`;
    expect(steps!.n).toBe(0);
    expect(await limitHeld(db().sql, 'lim-bad-partition')).toEqual({ held: 0, slots: 0, granted: 0 });
    const attempts = await db().sql`select 1 from stepkey.step_attempts where scope = 'acme' and run_key in (${threw.key}, ${number.key})`;
    expect(attempts.length).toBe(0);
  });
});
