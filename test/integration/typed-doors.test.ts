/**
 * Typed at every door, against Postgres: a send typed by a workflow from the
 * run's key alone (`engine.send(workflow, ref, …)`, `workflow.ref(ref)`) and a
 * read typed by it (`engine.get(workflow, ref)`, the output parsed with the
 * run's own version's schema). A run of another workflow is refused with
 * `workflow_mismatch`, before anything is stored; the untyped forms still work.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { dateField } from '../../src/workflow/schemas.js';
import { isStepkeyError } from '../../src/errors/stepkey-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { Engine } from '../../src/engine/engine.js';
import { Clock } from '../../src/db/clock.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';

const db = useTestDatabase();

const events = {
  approved: z.object({ by: z.string(), at: dateField() }),
  rejected: z.object({ by: z.string(), reason: z.string() }),
};

const approvalV1 = defineWorkflow({
  name: 'doors-approval',
  version: 1,
  input: z.object({ amountCents: z.number() }),
  output: z.object({ approved: z.boolean(), at: dateField() }),
  events,
  steps: {},
  async run() {
    return { approved: true, at: new Date('2026-12-01T09:00:00Z') };
  },
});

const approvalV2 = defineWorkflow({
  name: 'doors-approval',
  version: 2,
  input: z.object({ amountCents: z.number() }),
  output: z.object({ decision: z.enum(['approved', 'rejected']), by: z.string(), decidedAt: dateField() }),
  events,
  steps: { decision: step('decision.v1') },
  async run({ steps }) {
    const got = await steps.decision.waitForEvent('rejected');
    return { decision: 'rejected' as const, by: got.payload.by, decidedAt: new Date('2026-12-02T10:00:00Z') };
  },
});

const report = defineWorkflow({
  name: 'doors-report',
  version: 1,
  input: z.object({}),
  events: { rejected: z.object({ by: z.string(), reason: z.string() }) },
  steps: { wait: step('wait.v1') },
  async run({ steps }) {
    await steps.wait.waitForEvent('rejected');
    return { pages: 3 };
  },
});

const status = async (ref: { scope: string; key: string }) =>
  (await db().sql`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status as string;
const messages = async (ref: { scope: string; key: string }) =>
  (await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.mailbox where scope = ${ref.scope} and run_key = ${ref.key}`)[0]!.n;

const caught = async (work: Promise<unknown>) => {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isStepkeyError(error)).toBe(true);
  return error as Error & { code: string };
};

const engineOf = (workflows: Parameters<typeof testEngine>[1]) => testEngine(db(), workflows);

describe('a send typed by the workflow, from the key alone', () => {
  it('delivers the event to the run by (workflow, { scope, key }) and by workflow.ref(), and reads the result back typed', async () => {
    const engine = new Engine({ database: db(), workflows: [approvalV1, approvalV2, report], clock: new Clock(), leaseMs: LONG_LEASE_MS, onError: () => {} });
    const ref = { scope: 'acme', key: uniqueKey('typed-send') };
    await engine.start(approvalV2, ref, { amountCents: 1200 });
    await expect.poll(() => status(ref)).toBe('waiting');

    // A typed ref made from the workflow: an event the run does not wait for is kept in its mailbox.
    const kept = await engine.send(approvalV2.ref(ref), 'approved', { by: 'bob', at: new Date() }, { key: 'note-1' });
    expect(kept.delivered).toBe(true);
    expect(await messages(ref)).toBe(1);
    expect(await status(ref)).toBe('waiting');
    // A server holds only the client's key: the workflow types the send.
    const sent = await engine.send(approvalV2, { scope: ref.scope, key: ref.key }, 'rejected', { by: 'ada', reason: 'over budget' }, { key: 'decision-1' });
    expect(sent).toEqual({ delivered: true, seq: expect.any(Number) });
    await expect.poll(() => status(ref)).toBe('completed');

    const read = await engine.get(approvalV2, ref);
    expect(read?.status).toBe('completed');
    expect(read?.output).toEqual({ decision: 'rejected', by: 'ada', decidedAt: new Date('2026-12-02T10:00:00Z') });
    expect(read?.output && 'decidedAt' in read.output ? read.output.decidedAt : undefined).toBeInstanceOf(Date);
    expectTypeOf(read?.output).toEqualTypeOf<
      { approved: boolean; at: Date } | { decision: 'approved' | 'rejected'; by: string; decidedAt: Date } | undefined
    >();
    // The untyped read is unchanged: the output as stored, JSON text.
    const raw = await engine.get(ref);
    expect(JSON.parse(raw!.output!)).toEqual({ decision: 'rejected', by: 'ada', decidedAt: '2026-12-02T10:00:00.000Z' });
    await engine.shutdown();
  });

  it('refuses a typed send to a run of another workflow (workflow_mismatch, naming both) and stores nothing; a bad payload is refused as before', async () => {
    const engine = engineOf([approvalV2, report]);
    const ref = { scope: 'acme', key: uniqueKey('other-run') };
    await engine.start(report, ref, {});
    await expect.poll(() => status(ref)).toBe('waiting');

    const byWorkflow = await caught(engine.send(approvalV2, ref, 'rejected', { by: 'ada', reason: 'no' }, { key: 'm-1' }));
    expect(byWorkflow.code).toBe('workflow_mismatch');
    expect(byWorkflow.message).toContain(`run '${ref.key}' in scope 'acme' is a run of workflow 'doors-report' v1, not of workflow 'doors-approval'`);
    expect(byWorkflow.message).toContain('Nothing was stored');
    const byRef = await caught(engine.send(approvalV2.ref(ref), 'rejected', { by: 'ada', reason: 'no' }, { key: 'm-2' }));
    expect(byRef.code).toBe('workflow_mismatch');
    expect(await messages(ref)).toBe(0);
    expect(await status(ref)).toBe('waiting');

    // Typed by its own workflow, a payload the types would refuse is refused at run time too.
    const bad = await caught(engine.send(report, ref, 'rejected', { by: 42 } as never, { key: 'm-3' }));
    expect(bad.code).toBe('invalid_input');
    expect(await messages(ref)).toBe(0);

    // The untyped send still works, and the run goes on.
    await engine.send(ref, 'rejected', { by: 'ada', reason: 'no' }, { key: 'm-4' });
    await expect.poll(() => status(ref)).toBe('completed');
    expect((await engine.get(report, ref))?.output).toEqual({ pages: 3 });
    await engine.shutdown();
  });
});

describe('a read typed by the workflow', () => {
  it("parses a run of an older version with that version's own schema", async () => {
    const engine = engineOf([approvalV1, approvalV2]);
    const ref = { scope: 'acme', key: uniqueKey('old-version') };
    await engine.run(approvalV1, ref, { amountCents: 300 });

    // Read through the newest version's definition: the run is v1's, and v1's schema parses it.
    const read = await engine.get(approvalV2, ref);
    expect(read?.version).toBe(1);
    expect(read?.output).toEqual({ approved: true, at: new Date('2026-12-01T09:00:00Z') });
    expect(read?.output && 'at' in read.output ? read.output.at : undefined).toBeInstanceOf(Date);

    // An engine that no longer registers v1 cannot parse it, and says how to read it.
    const newer = engineOf([approvalV2]);
    const gone = await caught(newer.get(approvalV2, ref));
    expect(gone.code).toBe('version_not_found');
    expect(gone.message).toContain("it ran workflow 'doors-approval' version 1, which this engine does not register (registered: 2)");
    expect(gone.message).toContain('engine.get(ref)');
    expect(JSON.parse((await newer.get(ref))!.output!)).toEqual({ approved: true, at: '2026-12-01T09:00:00.000Z' });
    await engine.shutdown();
    await newer.shutdown();
  });

  it('refuses a run of another workflow with workflow_mismatch naming both; a run still waiting has no output; no run is undefined', async () => {
    const engine = engineOf([approvalV1, approvalV2, report]);
    const ref = { scope: 'acme', key: uniqueKey('read-other') };
    await engine.start(report, ref, {});
    await expect.poll(() => status(ref)).toBe('waiting');

    const mismatch = await caught(engine.get(approvalV1, ref));
    expect(mismatch.code).toBe('workflow_mismatch');
    expect(mismatch.message).toMatch(
      new RegExp(`Cannot read the run as workflow 'doors-approval': run '${ref.key}' in scope 'acme' is a run of workflow 'doors-report' v1, not of workflow 'doors-approval'\\. Read it with engine\\.get\\(doors-report, ref\\)`),
    );

    const waiting = await engine.get(report, ref);
    expect(waiting?.status).toBe('waiting');
    expect(waiting?.output).toBeUndefined();
    expect(waiting?.wait).toMatchObject({ kind: 'event', for: 'rejected' });

    expect(await engine.get(approvalV1, { scope: 'acme', key: uniqueKey('nobody') })).toBeUndefined();
    await expect(engine.get(approvalV1, { scope: '', key: 'k' })).rejects.toMatchObject({ code: 'invalid_scope' });
    await engine.shutdown();
  });
});
