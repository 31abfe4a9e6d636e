/**
 * Text Postgres cannot store: a NUL character (U+0000), the one character it
 * refuses in a text value. Every string a caller hands stepkey that reaches
 * SQL — the dashboard's filters and keys, a queue's or a limit's partition,
 * an event's topic, an action's actor, a resolution's step, a rerun's step,
 * a ledger claim's name — is refused with `invalid_input` (400) naming it,
 * before anything is written, never a database error.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDashboard } from '../../src/dashboard/dashboard.js';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { limitHeld } from '../helpers/limits.js';

const db = useTestDatabase({ max: 5 });
const NUL = '\u0000';

const byTenant = defineQueue<{ tenant: string }>({ name: 'nul-tenants', concurrency: 2, partitionBy: (input) => input.tenant });
const byAccount = defineLimit<{ tenant: string }>({ name: 'nul-accounts', partitionBy: (input) => input.tenant, perPartition: { concurrency: 1 } });

const queued = defineWorkflow({
  name: 'nul-queued',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { work: step('nul-work.v1') },
  async run({ steps }) {
    return steps.work.call(async () => 'done');
  },
});

const limited = defineWorkflow({
  name: 'nul-limited',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { first: step('nul-first.v1'), charge: step('nul-charge.v1', { limit: byAccount }) },
  events: { paid: z.object({ id: z.string() }) },
  async run({ steps }) {
    await steps.first.tx(async () => 'first');
    return steps.charge.call(async () => 'charged');
  },
});

const engines: Engine[] = [];
afterAll(async () => {
  for (const engine of engines) await engine.shutdown();
});

function engine(): Engine {
  const made = testEngine(db(), [queued, limited], { queues: [byTenant], limits: [byAccount] });
  engines.push(made);
  return made;
}

describe('the dashboard', () => {
  it('answers 400 invalid_input naming the filter or key, and logs no failure', async () => {
    const failures: unknown[] = [];
    const dashboard = createDashboard({ database: db(), onError: (error) => failures.push(error) });
    const cursor = Buffer.from(JSON.stringify(['2026-01-01T00:00:00.000000Z', `acme${NUL}`, 'k'])).toString('base64url');
    try {
      for (const [path, field] of [
        ['/api/runs?scope=acme%00', 'scope'],
        ['/api/runs?workflow=checkout%00', 'workflow'],
        [`/api/runs?cursor=${cursor}`, 'cursor'],
        ['/api/key?key=k%00', 'key'],
        ['/api/key?key=k&scope=acme%00', 'scope'],
        ['/api/run?scope=acme%00&key=k', 'scope'],
        ['/api/run?scope=acme&key=k%00', 'key'],
      ] as const) {
        const response = await dashboard.fetch(new Request(`http://127.0.0.1${path}`));
        const body = (await response.json()) as { error: { code: string; message: string } };
        expect(response.status, path).toBe(400);
        expect(body.error.code, path).toBe('invalid_input');
        // A cursor is stepkey's own text: one holding a NUL was not made by stepkey.
        expect(body.error.message, path).toMatch(field === 'cursor' ? /page cursor is not one stepkey made/ : new RegExp(`'${field}'.*NUL`));
      }
      expect(failures).toEqual([]);
    } finally {
      await dashboard.close();
    }
  });
});

describe('the engine', () => {
  it('refuses an enqueue whose queue partition holds a NUL, naming the queue, and stores nothing', async () => {
    const key = uniqueKey('nul-enqueue');
    await expect(engine().enqueue(queued, { scope: 'acme', key }, { tenant: `t${NUL}1` }, { queue: byTenant })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/Queue 'nul-tenants'.*partition.*NUL/),
    });
    expect(await db().sql`select 1 from stepkey.ledger where scope = 'acme' and key = ${key}`).toHaveLength(0);
  });

  it('fails a limited step whose partition holds a NUL as invalid input naming the limit — resumable, nothing taken', async () => {
    const ref = { scope: 'acme', key: uniqueKey('nul-limit') };
    const failure = await engine().run(limited, ref, { tenant: `t${NUL}2` }).catch((error: unknown) => error);
    expect(failure).toMatchObject({ message: expect.stringMatching(/Limit 'nul-accounts' \(step 'nul-charge.v1'\).*partition.*NUL/) });
    expect((failure as Error).message).not.toMatch(/Postgres failed|invalid byte sequence|database_error/);
    const [row] = await db().sql<{ status: string; last_error: string }[]>`select status, last_error from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    expect(row?.status).toBe('failed');
    expect(JSON.parse(row!.last_error)).toMatchObject({ code: 'invalid_input' });
    expect(await limitHeld(db().sql, 'nul-accounts')).toEqual({ held: 0, slots: 0, granted: 0 });
  });

  it('refuses an event topic, an actor, a resolution step and a rerun step holding a NUL, naming each', async () => {
    const e = engine();
    const ref = { scope: 'acme', key: uniqueKey('nul-run') };
    await e.run(limited, ref, { tenant: 't3' });
    await expect(e.send({ ...ref, workflow: limited }, `paid${NUL}` as 'paid', { id: 'x' }, { key: 'sender-1' })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/topic.*NUL/),
    });
    await expect(e.cancel(ref, 'stop', { actor: `ops${NUL}`, source: 'api' })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/actor.*NUL/),
    });
    await expect(e.resolve(ref, { step: `nul-charge.v1${NUL}`, retry: true })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/step.*NUL/),
    });
    await expect(e.rerun(ref, { from: `nul-first.v1${NUL}`, key: uniqueKey('nul-rerun') })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/from.*NUL/),
    });
    expect(await db().sql`select 1 from stepkey.audit_log where key = ${ref.key}`).toHaveLength(0);
  });

  it('refuses a scope or key with a NUL as it refuses any control character', async () => {
    await expect(engine().run(limited, { scope: `acme${NUL}`, key: uniqueKey('nul-scope') }, { tenant: 't' })).rejects.toMatchObject({
      code: 'invalid_scope',
    });
    await expect(engine().run(limited, { scope: 'acme', key: `k${NUL}` }, { tenant: 't' })).rejects.toMatchObject({ code: 'invalid_key' });
  });
});

describe('the ledger', () => {
  it("refuses a claim whose name or fingerprint holds a NUL, naming it", async () => {
    const ledger = new Ledger({ sql: db().sql });
    const key = uniqueKey('nul-claim');
    await expect(ledger.once({ scope: 'acme', key, fingerprint: 'fp', kind: 'request', name: `orders.create${NUL}` }, async () => 1)).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/name.*NUL/),
    });
    await expect(ledger.once({ scope: 'acme', key, fingerprint: `fp${NUL}`, kind: 'request' }, async () => 1)).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/fingerprint.*NUL/),
    });
    expect(await db().sql`select 1 from stepkey.ledger where scope = 'acme' and key = ${key}`).toHaveLength(0);
  });
});
