/**
 * OpenTelemetry traces with the SDK's in-memory exporter: one trace from a
 * tRPC call through its run, the run's step attempts and the email's enqueue,
 * to the email's delivery by a worker; a run taken over by another engine
 * after its first process stopped continues the trace stored with it; and,
 * before any SDK is registered, no span and no trace context anywhere.
 * Children, waits and runs started outside any span: tracing-runs.test.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, trace, type Tracer } from '@opentelemetry/api';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEffect } from '../../src/outbox/effect.js';
import { tracingEnabled } from '../../src/telemetry/tracing.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';
import { storedContext as storedTraceContext, useTracingSdk } from '../helpers/tracing.js';

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

const storedContext = (scope: string, key: string) => storedTraceContext(db, scope, key);

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
  const { exporter, tracer, byName, one, parentOf } = useTracingSdk();

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
});
