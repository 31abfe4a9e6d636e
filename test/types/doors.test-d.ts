/**
 * Typed at every door: a send from a run's key alone is checked by the
 * workflow's events (`engine.send(workflow, ref, …)`, `workflow.ref(ref)`),
 * and a read (`engine.get(workflow, ref)`) gives the output typed as the union
 * of the outputs of the versions the engine registers. Checked by
 * `npm run typecheck`; nothing here runs. Also: a child started on a queue,
 * and limits spelling slots per partition as queues do.
 */
import { expectTypeOf } from 'vitest';
import { z } from 'zod';
import { createEngine, dateField, defineLimit, defineQueue, defineWorkflow, step, type Engine, type RunInfo, type Sent, type TypedRunInfo } from 'stepkey';

const approvalV1 = defineWorkflow({
  name: 'types.approval',
  version: 1,
  input: z.object({ amountCents: z.number() }),
  output: z.object({ approved: z.boolean() }),
  events: {
    approved: z.object({ by: z.string(), at: dateField() }),
    rejected: z.object({ by: z.string(), reason: z.string() }),
  },
  steps: { wait: step('wait.v1') },
  async run({ steps }) {
    const got = await steps.wait.waitForEvent('approved');
    return { approved: got.payload.by.length > 0 };
  },
});

const approvalV2 = defineWorkflow({
  name: 'types.approval',
  version: 2,
  input: z.object({ amountCents: z.number() }),
  output: z.object({ decision: z.enum(['approved', 'rejected']), by: z.string() }),
  events: {
    approved: z.object({ by: z.string(), at: dateField() }),
    rejected: z.object({ by: z.string(), reason: z.string() }),
  },
  steps: { wait: step('wait.v1') },
  async run() {
    return { decision: 'approved' as const, by: 'ada' };
  },
});

const report = defineWorkflow({
  name: 'types.report',
  version: 1,
  input: z.object({}),
  steps: {},
  async run() {
    return { pages: 3 };
  },
});

export async function doors() {
  const engine = createEngine({ database: 'postgres://localhost/none', workflows: [approvalV1, approvalV2, report] });
  const ref = { scope: 'acme', key: 'expense-7' };
  const at = new Date();

  // A send from the key alone, typed by the workflow: the event's name and payload are checked.
  expectTypeOf(await engine.send(approvalV2, ref, 'approved', { by: 'ada', at }, { key: 'm-1' })).toEqualTypeOf<Sent>();
  await engine.send(approvalV2, ref, 'rejected', { by: 'ada', reason: 'over budget' }, { key: 'm-2' });
  // @ts-expect-error: no such event
  await engine.send(approvalV2, ref, 'maybe', { by: 'ada' }, { key: 'm-3' });
  // @ts-expect-error: the payload of 'rejected' has a string `by` and a reason
  await engine.send(approvalV2, ref, 'rejected', { by: 42 }, { key: 'm-4' });
  // @ts-expect-error: 'approved' needs its date
  await engine.send(approvalV2, ref, 'approved', { by: 'ada' }, { key: 'm-5' });
  // @ts-expect-error: a workflow without events takes none
  await engine.send(report, ref, 'approved', { by: 'ada', at }, { key: 'm-6' });

  // A typed ref made from the workflow.
  const typed = approvalV1.ref(ref);
  expectTypeOf(typed.scope).toEqualTypeOf<string>();
  await engine.send(typed, 'approved', { by: 'ada', at }, { key: 'm-7' });
  // @ts-expect-error: no such event
  await engine.send(typed, 'maybe', {}, { key: 'm-8' });
  // @ts-expect-error: wrong payload
  await engine.send(typed, 'rejected', { by: 42 }, { key: 'm-9' });

  // The untyped form stays: any topic, any payload (checked when it is sent).
  await engine.send(ref, 'rejected', { by: 42 }, { key: 'm-10' });

  // A typed read: the output is the union of the registered versions' outputs.
  const read = await engine.get(approvalV1, ref);
  expectTypeOf(read).toEqualTypeOf<TypedRunInfo<{ approved: boolean } | { decision: 'approved' | 'rejected'; by: string }> | undefined>();
  expectTypeOf(read?.output).toEqualTypeOf<{ approved: boolean } | { decision: 'approved' | 'rejected'; by: string } | undefined>();
  expectTypeOf(read?.status).toEqualTypeOf<RunInfo['status'] | undefined>();
  const other = await engine.get(report, ref);
  expectTypeOf(other?.output).toEqualTypeOf<{ pages: number } | undefined>();
  // @ts-expect-error: the typed read's output is parsed, not JSON text
  expectTypeOf(other?.output).toEqualTypeOf<string | undefined>();

  // The untyped read keeps its JSON text.
  expectTypeOf((await engine.get(ref))?.output).toEqualTypeOf<string | undefined>();

  // An engine whose type does not know the versions types a read by the workflow given.
  const plain: Engine = engine;
  expectTypeOf((await plain.get(approvalV2, ref))?.output).toEqualTypeOf<{ decision: 'approved' | 'rejected'; by: string } | undefined>();

  // A workflow this engine does not register cannot be read through it.
  const unregistered = defineWorkflow({ name: 'types.elsewhere', version: 1, input: z.object({}), steps: {}, async run() {} });
  // @ts-expect-error: not registered with this engine
  await engine.get(unregistered, ref);
}

// A child on a queue: the options take the queue (object or name) and a priority besides the step's id.
const reports = defineQueue<{ tenant: string }>({ name: 'types.reports', concurrency: 4, partitionBy: (input) => input.tenant, perPartition: { concurrency: 1 } });
export const monthly = defineWorkflow({
  name: 'types.monthly',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { report: step('report.v1') },
  async run({ input, steps }) {
    const got = await steps.report.child(report, {}, { queue: reports, priority: 5, id: input.tenant });
    expectTypeOf(got).toEqualTypeOf<{ pages: number }>();
    const ref = await steps.report.startChild(report, {}, { queue: 'types.reports', id: 'named' });
    expectTypeOf(ref.key).toEqualTypeOf<string>();
    // @ts-expect-error: a queue is a queue or its name
    await steps.report.child(report, {}, { queue: 42 });
    return got.pages;
  },
});

// Limits spell slots per partition as queues do; the old spelling is refused by type.
export const limits = [
  defineLimit({ name: 'types.whole', concurrency: 3 }),
  defineLimit<{ merchant: string }>({ name: 'types.per-merchant', partitionBy: (input) => input.merchant, perPartition: { concurrency: 2 } }),
  // @ts-expect-error: concurrency beside partitionBy is the old spelling
  defineLimit<{ merchant: string }>({ name: 'types.old', partitionBy: (input) => input.merchant, concurrency: 2 }),
];

// An engine made with no workflows by type reads any workflow's runs, typed by the workflow given.
export async function emptyEngine() {
  const engine = createEngine({ database: 'postgres://localhost/none', workflows: [] });
  expectTypeOf((await engine.get(report, { scope: 's', key: 'k' }))?.output).toEqualTypeOf<{ pages: number } | undefined>();
}
