/**
 * OpenTelemetry traces with the SDK's in-memory exporter: one trace from a
 * tRPC call through its run, the run's step attempts and the email's enqueue,
 * to the email's delivery by a worker; a run taken over by another engine
 * after its first process stopped continues the trace stored with it; a
 * child run sits under the parent's step that started it, and the parent's
 * wake links the child that ended; each wait step's turn (the park, the
 * finding) is a span; a run started outside any span stays in its first
 * execution's trace, and a stored context is never replaced; and, before any
 * SDK is registered, no span and no trace context anywhere.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, trace, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEffect } from '../../src/outbox/effect.js';
import { tracingEnabled } from '../../src/telemetry/tracing.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase({ max: 12 });

const delivered: string[] = [];
const sendEmail = defineEffect({
  name: 'tracing.email',
  payload: z.object({ to: z.string(), orderId: z.number() }),
  async handler(email, { key }) {
    delivered.push(`${email.to}:${key}`);
  },
});

/** Calls of the payment step, by run: the first of each fails (a retryable error). */
const charges = new Map<string, number>();
const order = defineWorkflow({
  name: 'traced-order',
  version: 2,
  input: z.object({ email: z.string() }),
  steps: {
    reserve: step('reserve.v1', { output: z.object({ orderId: z.number() }) }),
    charge: step('charge.v1', { output: z.object({ paymentId: z.string() }), retry: { attempts: 3, initialDelayMs: 5 } }),
    confirm: step('confirm.v1'),
    finish: step('finish.v1'),
  },
  async run({ input, steps, ctx }) {
    const { orderId } = await steps.reserve.tx(async () => ({ orderId: 7 }));
    const { paymentId } = await steps.charge.call(async () => {
      const calls = (charges.get(ctx.key) ?? 0) + 1;
      charges.set(ctx.key, calls);
      if (calls === 1) throw new Error('payment service hiccup');
      return { paymentId: `pay-${orderId}` };
    });
    await steps.confirm.enqueue(sendEmail, { to: input.email, orderId });
    await steps.finish.tx(async () => undefined);
    return { orderId, paymentId };
  },
});

/** A run whose first step waits for the test (on its first execution only). */
let release: () => void = () => {};
let reached = 0;
const handedOver = defineWorkflow({
  name: 'traced-handover',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { first: step('first.v1'), second: step('second.v1') },
  async run({ steps }) {
    await steps.first.tx(async () => {
      reached += 1;
      if (reached === 1) await new Promise<void>((resolve) => (release = resolve));
    });
    await steps.second.tx(async () => undefined);
    return 'done';
  },
});

const kid = defineWorkflow({
  name: 'traced-kid',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { work: step('kid-work.v1', { output: z.number() }) },
  async run({ input, steps }) {
    return steps.work.tx(async () => input.n + 1);
  },
});
const family = defineWorkflow({
  name: 'traced-family',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { spawn: step('spawn.v1'), after: step('after.v1') },
  async run({ input, steps }) {
    const got = await steps.spawn.child(kid, { n: input.n });
    await steps.after.tx(async () => undefined);
    return got;
  },
});

/** A run that waits for an approval (with a deadline), then sleeps an hour. */
const waiter = defineWorkflow({
  name: 'traced-waiter',
  version: 1,
  input: z.object({}),
  events: { approved: z.object({ by: z.string() }) },
  steps: { approval: step('approval.v1'), nap: step('nap.v1') },
  async run({ steps }) {
    const approval = await steps.approval.waitForEvent('approved', { timeoutMs: 86_400_000 });
    await steps.nap.sleep(3_600_000);
    return approval.type;
  },
});

interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
  tenant: string | null;
}

/** The order API: a tRPC procedure, in its own span (as an app's tRPC tracing middleware makes), running `order`. */
async function serveOrders(tracer: () => Tracer, engine: ReturnType<typeof testEngine>) {
  const t = initTRPC.context<Ctx>().create({ isDev: false });
  const idempotency = createIdempotency<Ctx>({ ledger: testLedger(db()), engine, scope: (ctx) => ctx.tenant });
  const traced = t.procedure.use(({ path, next }) =>
    tracer().startActiveSpan(`trpc ${path}`, async (span) => {
      try {
        return await next();
      } finally {
        span.end();
      }
    }),
  );
  const router = t.router({
    orders: t.router({
      create: traced
        .input(z.object({ email: z.string() }))
        .use(idempotency.workflow(order))
        .mutation(({ ctx }) => ctx.run.output),
    }),
  });
  const server = createHTTPServer({
    router,
    createContext: ({ req, res }) => ({ req, res, tenant: /^Bearer (\w+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null }),
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const jobPayload = async (key: string) =>
  (await db().sql<{ payload: Record<string, unknown> }[]>`select payload from graphile_worker._private_jobs where key = ${key}`)[0]?.payload;

const storedContext = async (scope: string, key: string) =>
  (await db().sql<{ trace_context: string | null }[]>`select trace_context from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]
    ?.trace_context;

describe('without an OpenTelemetry SDK', () => {
  it('builds no span, stores no trace context and puts none in the job', async () => {
    expect(tracingEnabled()).toBe(false);
    const engine = testEngine(db(), [order]);
    try {
      const key = uniqueKey('untraced');
      expect(await engine.run(order, { scope: 'plain', key }, { email: 'a@example.com' })).toEqual({ orderId: 7, paymentId: 'pay-7' });
      expect(await storedContext('plain', key)).toBeNull();
      const info = await engine.get({ scope: 'plain', key });
      const confirm = info!.steps.find((s) => s.name === 'confirm.v1')!;
      const payload = await jobPayload(confirm.key);
      expect(payload).toBeDefined();
      expect(payload).not.toHaveProperty('t');
      // The API itself answers with a non-recording span: no SDK, nothing recorded.
      expect(trace.getTracer('probe').startSpan('probe').isRecording()).toBe(false);
    } finally {
      await engine.shutdown();
    }
  });
});

describe('with the SDK registered', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const contextManager = new AsyncLocalStorageContextManager();
  const tracer = () => trace.getTracer('stepkey-test');
  beforeAll(() => {
    context.setGlobalContextManager(contextManager.enable());
    trace.setGlobalTracerProvider(provider);
  });
  afterAll(async () => {
    await provider.shutdown();
    trace.disable();
    context.disable();
  });

  const byName = (spans: ReadableSpan[], name: string) => spans.filter((span) => span.name === name);
  const one = (spans: ReadableSpan[], name: string) => {
    const found = byName(spans, name);
    expect(found, name).toHaveLength(1);
    return found[0]!;
  };
  const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
  /**
   * Takes a started `waiter` run through its three executions: parked on the
   * event, the event sent (it parks on the timer), the timer swept; until the
   * run has completed and its three execution spans have ended.
   */
  const driveWaiter = async (engine: ReturnType<typeof testEngine>, ref: { scope: string; key: string }) => {
    await expect.poll(async () => (await engine.get(ref))?.wait?.kind).toBe('event');
    expect(await engine.send(ref, 'approved', { by: 'ada' }, { key: 'approval-1' })).toMatchObject({ delivered: true });
    await expect.poll(async () => (await engine.get(ref))?.wait?.kind).toBe('timer');
    engine.clock.advance(3_600_000);
    await engine.sweep();
    await expect.poll(async () => (await engine.get(ref))?.status).toBe('completed');
    await expect.poll(() => byName(exporter.getFinishedSpans(), 'stepkey.run traced-waiter').length).toBe(3);
  };

  it('follows a tRPC call through its run, its step attempts and the email enqueue to the delivery, in one trace', async () => {
    expect(tracingEnabled()).toBe(true);
    const engine = testEngine(db(), [order]);
    const served = await serveOrders(tracer, engine);
    const worker = await runWorker({ database: db(), effects: [sendEmail], engine: testEngine(db(), []), concurrency: 1, purgeSchedule: false, onError: () => {} });
    try {
      exporter.reset();
      const key = uniqueKey('traced');
      const answer = await post(`${served.url}`, 'orders.create', { email: 'ada@example.com' }, { authorization: 'Bearer acme', 'idempotency-key': `"${key}"` });
      expect(answer.status).toBe(200);
      const info = await engine.get({ scope: 'acme', key });
      const keyOf = (name: string) => info!.steps.find((s) => s.name === name)!.key;
      // The job the untraced run enqueued earlier is delivered by this worker too: only this run's spans count.
      const ours = () => exporter.getFinishedSpans().filter((span) => span.attributes['stepkey.effect'] === undefined || span.attributes['stepkey.key'] === keyOf('confirm.v1'));
      await expect.poll(() => byName(ours(), 'stepkey.deliver tracing.email').length).toBe(1);
      const spans = ours();

      const call = one(spans, 'trpc orders.create');
      const run = one(spans, 'stepkey.run traced-order');
      const steps = spans.filter((span) => span.name.startsWith('stepkey.step '));
      const enqueue = one(spans, 'stepkey.enqueue tracing.email');
      const delivery = one(spans, 'stepkey.deliver tracing.email');
      const traceId = call.spanContext().traceId;
      for (const span of [run, ...steps, enqueue, delivery]) expect(span.spanContext().traceId, span.name).toBe(traceId);

      // The procedure's span is the run's parent; the run's execution is the parent of every step attempt.
      expect(parentOf(run)).toBe(call.spanContext().spanId);
      expect(run.attributes).toMatchObject({
        'stepkey.scope': 'acme',
        'stepkey.key': key,
        'stepkey.workflow': 'traced-order',
        'stepkey.workflow.version': 2,
        'stepkey.attempt': 1,
        'stepkey.continued': false,
        'stepkey.outcome': 'completed',
      });
      expect(steps.map((span) => [span.attributes['stepkey.step'], span.attributes['stepkey.attempt'], span.attributes['stepkey.outcome']])).toEqual([
        ['reserve.v1', 1, 'completed'],
        ['charge.v1', 1, 'failed'],
        ['charge.v1', 2, 'completed'],
        ['confirm.v1', 1, 'completed'],
        ['finish.v1', 1, 'completed'],
      ]);
      for (const span of steps) {
        expect(parentOf(span), span.name).toBe(run.spanContext().spanId);
        expect(span.attributes['stepkey.scope']).toBe('acme');
        expect(span.attributes['stepkey.run']).toBe(key);
      }
      expect(steps.map((span) => span.attributes['stepkey.key'])).toEqual(['reserve.v1', 'charge.v1', 'charge.v1', 'confirm.v1', 'finish.v1'].map(keyOf));
      const failedCharge = steps[1]!;
      expect(failedCharge.status.code).toBe(2); // ERROR
      expect(failedCharge.events.some((event) => event.name === 'exception')).toBe(true);

      // The enqueue is a child of the confirm step's attempt, and so is the delivery: its context rode in the job.
      const confirm = steps[3]!;
      expect(parentOf(enqueue)).toBe(confirm.spanContext().spanId);
      expect(enqueue.attributes).toMatchObject({ 'stepkey.scope': 'acme', 'stepkey.key': keyOf('confirm.v1'), 'stepkey.effect': 'tracing.email', 'stepkey.step': 'confirm.v1' });
      expect(parentOf(delivery)).toBe(confirm.spanContext().spanId);
      expect(delivery.attributes).toMatchObject({
        'stepkey.scope': 'acme',
        'stepkey.key': keyOf('confirm.v1'),
        'stepkey.effect': 'tracing.email',
        'stepkey.attempt': 1,
        'stepkey.outcome': 'applied',
      });
      expect(delivered).toContain(`ada@example.com:${keyOf('confirm.v1')}`);

      // The run's row keeps the context of the call that started it.
      expect(await storedContext('acme', key)).toBe(`00-${traceId}-${call.spanContext().spanId}-01`);
    } finally {
      await worker.stop();
      await served.close();
      await engine.shutdown();
    }
  });

  it('continues the stored trace when another engine takes the run over after its first process stopped', async () => {
    const first = testEngine(db(), [handedOver]);
    const second = testEngine(db(), [handedOver]);
    try {
      exporter.reset();
      const ref = { scope: 'handover', key: uniqueKey('handover') };
      const caller = tracer().startSpan('caller');
      await context.with(trace.setSpan(context.active(), caller), () => first.start(handedOver, ref, { n: 1 }));
      caller.end();
      await expect.poll(() => reached).toBe(1);
      // The first process stops: its run finishes the step it is in and gives its lease up.
      const stopping = first.shutdown();
      release();
      await stopping;
      expect((await first.get(ref))?.status).toBe('running');

      // Another engine's sweep, outside any span, takes it over.
      expect(await second.sweep()).toBe(1);
      await expect.poll(async () => (await second.get(ref))?.status).toBe('completed');
      await expect.poll(() => byName(exporter.getFinishedSpans(), 'stepkey.run traced-handover').length).toBe(2);

      const spans = exporter.getFinishedSpans();
      const [stopped, continued] = byName(spans, 'stepkey.run traced-handover');
      const traceId = caller.spanContext().traceId;
      expect(stopped!.attributes).toMatchObject({ 'stepkey.attempt': 1, 'stepkey.continued': false, 'stepkey.outcome': 'stopped', 'stepkey.stop_reason': 'shutting_down' });
      expect(continued!.attributes).toMatchObject({ 'stepkey.key': ref.key, 'stepkey.attempt': 2, 'stepkey.continued': true, 'stepkey.outcome': 'completed' });
      // Both executions are children of the caller's span, the later one through the stored context.
      for (const execution of [stopped!, continued!]) {
        expect(execution.spanContext().traceId).toBe(traceId);
        expect(parentOf(execution)).toBe(caller.spanContext().spanId);
      }
      expect(continued!.parentSpanContext?.isRemote).toBe(true);
      expect(continued!.links).toEqual([]);
      expect(await storedContext(ref.scope, ref.key)).toBe(`00-${traceId}-${caller.spanContext().spanId}-01`);
      const second_ = one(spans, 'stepkey.step second.v1');
      expect(parentOf(second_)).toBe(continued!.spanContext().spanId);
      expect(byName(spans, 'stepkey.step first.v1').map(parentOf)).toEqual([stopped!.spanContext().spanId]);
    } finally {
      await first.shutdown();
      await second.shutdown();
    }
  });

  it("puts a child run under its parent's execution, and links the parent's wake to the child that ended", async () => {
    const engine = testEngine(db(), [family, kid]);
    try {
      exporter.reset();
      const ref = { scope: 'family', key: uniqueKey('family') };
      const caller = tracer().startSpan('caller');
      const handle = await context.with(trace.setSpan(context.active(), caller), () => engine.start(family, ref, { n: 1 }));
      caller.end();
      await expect.poll(async () => (await engine.get(handle))?.status).toBe('completed');
      await expect.poll(() => byName(exporter.getFinishedSpans(), 'stepkey.run traced-family').length).toBe(2);

      const spans = exporter.getFinishedSpans();
      const [parked, woken] = byName(spans, 'stepkey.run traced-family');
      const child = one(spans, 'stepkey.run traced-kid');
      expect(parked!.attributes['stepkey.outcome']).toBe('waiting');
      expect(woken!.attributes).toMatchObject({ 'stepkey.continued': true, 'stepkey.outcome': 'completed' });
      for (const span of [parked!, woken!, child]) expect(span.spanContext().traceId).toBe(caller.spanContext().traceId);
      // The child step's turns: the one that started the child and parked, under the parked execution; the one
      // that found the child ended, under the woken one.
      const childKey = childRunKey(keyOfStep(await engine.get(ref), 'spawn.v1'));
      const [started, found] = byName(spans, 'stepkey.step spawn.v1');
      expect(started!.attributes).toMatchObject({ 'stepkey.step.kind': 'child', 'stepkey.outcome': 'parked', 'stepkey.wait.for': childKey, 'stepkey.attempt': 1 });
      expect(started!.attributes['stepkey.wait.until']).toBeUndefined();
      expect(found!.attributes).toMatchObject({ 'stepkey.step.kind': 'child', 'stepkey.outcome': 'completed' });
      expect(parentOf(started!)).toBe(parked!.spanContext().spanId);
      expect(parentOf(found!)).toBe(woken!.spanContext().spanId);
      // The child's first execution runs under the step that started it, and its row stores that context.
      expect(parentOf(child)).toBe(started!.spanContext().spanId);
      expect(await storedContext(ref.scope, childKey)).toBe(`00-${child.spanContext().traceId}-${started!.spanContext().spanId}-01`);
      // The parent, woken by the child's end, continues the caller's trace; woken from the child's execution (the
      // parent's own has long unwound from its park), it links that execution — and never another span.
      expect(parentOf(woken!)).toBe(caller.spanContext().spanId);
      expect(woken!.links.map((link) => link.context.spanId).filter((id) => id !== child.spanContext().spanId)).toEqual([]);
    } finally {
      await engine.shutdown();
    }
  });

  it("makes a span of each wait step's turn: the park, with what it waits for and until when, and the finding", async () => {
    const engine = testEngine(db(), [waiter]);
    try {
      exporter.reset();
      const ref = { scope: 'waits', key: uniqueKey('waiter') };
      const caller = tracer().startSpan('caller');
      await context.with(trace.setSpan(context.active(), caller), () => engine.start(waiter, ref, {}));
      caller.end();
      await driveWaiter(engine, ref);

      const spans = exporter.getFinishedSpans();
      const info = (await engine.get(ref))!;
      const [approvalParked, approvalFound] = byName(spans, 'stepkey.step approval.v1');
      expect(approvalParked!.attributes).toMatchObject({
        'stepkey.scope': 'waits',
        'stepkey.key': keyOfStep(info, 'approval.v1'),
        'stepkey.run': ref.key,
        'stepkey.step.kind': 'waitForEvent',
        'stepkey.outcome': 'parked',
        'stepkey.wait.for': 'approved',
      });
      // A deadline (timeoutMs): the park says when it is due.
      expect(Date.parse(String(approvalParked!.attributes['stepkey.wait.until']))).toBeGreaterThan(Date.now());
      expect(approvalFound!.attributes).toMatchObject({ 'stepkey.step.kind': 'waitForEvent', 'stepkey.outcome': 'completed' });
      expect(approvalFound!.attributes['stepkey.wait.for']).toBeUndefined();
      const [napParked, napFound] = byName(spans, 'stepkey.step nap.v1');
      expect(napParked!.attributes).toMatchObject({ 'stepkey.step.kind': 'sleep', 'stepkey.outcome': 'parked' });
      expect(napParked!.attributes['stepkey.wait.for']).toBeUndefined();
      expect(typeof napParked!.attributes['stepkey.wait.until']).toBe('string');
      expect(napFound!.attributes).toMatchObject({ 'stepkey.step.kind': 'sleep', 'stepkey.outcome': 'completed' });
      // Each turn sits under the execution that reached it, in the run's one trace.
      const runs = byName(spans, 'stepkey.run traced-waiter');
      expect([approvalParked, approvalFound, napParked, napFound].map((span) => parentOf(span!))).toEqual([
        runs[0]!.spanContext().spanId,
        runs[1]!.spanContext().spanId,
        runs[1]!.spanContext().spanId,
        runs[2]!.spanContext().spanId,
      ]);
      for (const span of [...runs, approvalParked!, napFound!]) expect(span.spanContext().traceId).toBe(caller.spanContext().traceId);
    } finally {
      await engine.shutdown();
    }
  });

  it("keeps a run started outside any span in one trace: its first execution's, which the later ones continue", async () => {
    const engine = testEngine(db(), [waiter]);
    try {
      exporter.reset();
      const ref = { scope: 'waits', key: uniqueKey('untraced-start') };
      expect(trace.getActiveSpan()).toBeUndefined();
      await engine.start(waiter, ref, {});
      // The event is sent, and the timer swept, outside any span too.
      await driveWaiter(engine, ref);

      const [first, ...later] = byName(exporter.getFinishedSpans(), 'stepkey.run traced-waiter');
      // The first execution is a trace's root; its context is what the run's row stores.
      expect(first!.parentSpanContext).toBeUndefined();
      const { traceId, spanId } = first!.spanContext();
      expect(await storedContext(ref.scope, ref.key)).toBe(`00-${traceId}-${spanId}-01`);
      for (const execution of later) {
        expect(execution.spanContext().traceId).toBe(traceId);
        expect(parentOf(execution)).toBe(spanId);
        expect(execution.attributes['stepkey.continued']).toBe(true);
      }
    } finally {
      await engine.shutdown();
    }
  });

  it("stores a run's first execution's context in the run's first commit, when engine.run starts it outside any span", async () => {
    const engine = testEngine(db(), [kid]);
    try {
      exporter.reset();
      const ref = { scope: 'kids', key: uniqueKey('untraced-run') };
      expect(await engine.run(kid, ref, { n: 1 })).toBe(2);
      const execution = one(exporter.getFinishedSpans(), 'stepkey.run traced-kid');
      expect(execution.parentSpanContext).toBeUndefined();
      expect(await storedContext(ref.scope, ref.key)).toBe(`00-${execution.spanContext().traceId}-${execution.spanContext().spanId}-01`);
    } finally {
      await engine.shutdown();
    }
  });

  it('never moves a run to another trace: a stored context stays the one its start stored', async () => {
    const engine = testEngine(db(), [waiter]);
    try {
      exporter.reset();
      const ref = { scope: 'waits', key: uniqueKey('traced-start') };
      const caller = tracer().startSpan('caller');
      await context.with(trace.setSpan(context.active(), caller), () => engine.start(waiter, ref, {}));
      caller.end();
      await expect.poll(async () => (await engine.get(ref))?.wait?.kind).toBe('event');
      const stored = `00-${caller.spanContext().traceId}-${caller.spanContext().spanId}-01`;
      expect(await storedContext(ref.scope, ref.key)).toBe(stored);
      // Continued from inside another span: linked, still the caller's trace, and the row unchanged.
      const other = tracer().startSpan('other');
      await context.with(trace.setSpan(context.active(), other), () => engine.send(ref, 'approved', { by: 'ada' }, { key: 'approval-1' }));
      other.end();
      await expect.poll(async () => (await engine.get(ref))?.wait?.kind).toBe('timer');
      expect(await storedContext(ref.scope, ref.key)).toBe(stored);
      const runs = byName(exporter.getFinishedSpans(), 'stepkey.run traced-waiter');
      expect(runs.map((span) => span.spanContext().traceId)).toEqual([caller.spanContext().traceId, caller.spanContext().traceId]);
    } finally {
      await engine.shutdown();
    }
  });
});

function keyOfStep(info: Awaited<ReturnType<ReturnType<typeof testEngine>['get']>>, name: string): string {
  const found = info?.steps.find((s) => s.name === name);
  if (!found) throw new Error(`no step ${name}`);
  return found.key;
}
