/**
 * What enqueueing refuses, with nothing enqueued: a payload whose JSON form
 * its schema rejects (it would fail on every delivery), and a connection on
 * which the ledger row and the job would not commit together.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { inTransaction } from '../../src/db/transaction.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { dateField } from '../../src/workflow/schemas.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

const noop = async () => {};
const remindAt = defineEffect({ name: 'test.remind-at', payload: z.object({ at: z.date() }), handler: noop });
const measured = defineEffect({
  name: 'test.measured',
  payload: z.object({ text: z.string().transform((text) => text.length) }),
  handler: noop,
});
const remindAtJson = defineEffect({ name: 'test.remind-at-json', payload: z.object({ at: dateField() }), handler: noop });

const jobsOf = async (task: string) =>
  (await db().sql`select count(*)::int as n from graphile_worker.jobs where task_identifier = ${task}`)[0]!.n as number;
const ledgerRows = async (key: string) =>
  (await db().sql`select count(*)::int as n from stepkey.ledger where key = ${key}`)[0]!.n as number;

describe('payloads that must survive JSON', () => {
  it('refuses a z.date() payload: it says which effect and what to use; nothing is enqueued', async () => {
    const ref = { scope: 'acme', key: uniqueKey('date') };
    const error = await enqueueEffect(db().sql, remindAt, { at: new Date() }, ref).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'invalid_input' });
    expect((error as Error).message).toMatch(/payload of effect 'test\.remind-at' does not survive JSON/);
    expect((error as Error).message).toMatch(/at: .*expected date/);
    expect((error as Error).message).toMatch(/dateField\(\)/);
    expect((error as Error).message).toMatch(/Nothing was enqueued/);
    expect(await jobsOf('test.remind-at')).toBe(0);
    expect(await ledgerRows(ref.key)).toBe(0);
  });

  it('refuses a transform whose result fails the schema again', async () => {
    const ref = { scope: 'acme', key: uniqueKey('transform') };
    await expect(enqueueEffect(db().sql, measured, { text: 'hello' }, ref)).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/effect 'test\.measured' does not survive JSON.*text: .*expected string/),
    });
    expect(await jobsOf('test.measured')).toBe(0);
  });

  it('refuses it in a workflow’s enqueue step too: the step is not completed', async () => {
    const flow = defineWorkflow({
      name: 'outbox-date',
      version: 1,
      input: z.object({}),
      steps: { remind: step('remind.v1') },
      async run({ steps }) {
        return steps.remind.enqueue(remindAt, { at: new Date() });
      },
    });
    const engine = testEngine(db(), [flow]);
    const ref = { scope: 'acme', key: uniqueKey('flow') };
    const error = await engine.run(flow, ref, {}).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/effect 'test\.remind-at' does not survive JSON/);
    expect((await engine.get(ref))!.steps).toEqual([]);
    expect(await jobsOf('test.remind-at')).toBe(0);
    await engine.shutdown();
  });

  it('accepts dates through dateField()', async () => {
    const ref = { scope: 'acme', key: uniqueKey('date-json') };
    expect(await enqueueEffect(db().sql, remindAtJson, { at: new Date() }, ref)).toMatchObject({ enqueued: true });
    expect(await jobsOf('test.remind-at-json')).toBe(1);
  });
});

describe('connections', () => {
  it('refuses a reserved connection, where the ledger row would commit before the job is added', async () => {
    const ref = { scope: 'acme', key: uniqueKey('reserved') };
    const jobsBefore = await jobsOf(remindAtJson.name);
    const reserved = await db().sql.reserve();
    try {
      const error = await enqueueEffect(reserved, remindAtJson, { at: new Date() }, ref).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'invalid_options' });
      expect((error as Error).message).toMatch(/needs a transaction .* or a pool/);
      expect((error as Error).message).toMatch(/Nothing was enqueued/);
    } finally {
      reserved.release();
    }
    expect(await ledgerRows(ref.key)).toBe(0);
    expect(await jobsOf(remindAtJson.name)).toBe(jobsBefore);
  });

  it('still takes postgres.js’s sql.begin and stepkey’s transactions', async () => {
    const a = { scope: 'acme', key: uniqueKey('begin') };
    const b = { scope: 'acme', key: uniqueKey('tx') };
    await db().sql.begin((tx) => enqueueEffect(tx, remindAtJson, { at: new Date() }, a));
    await inTransaction(db().sql, (tx) => enqueueEffect(tx, remindAtJson, { at: new Date() }, b));
    expect(await ledgerRows(a.key)).toBe(1);
    expect(await ledgerRows(b.key)).toBe(1);
  });
});
