/**
 * OpenTelemetry traces of runs, with the SDK's in-memory exporter: a child
 * run sits under the parent's step that started it, and the parent's wake
 * links the child that ended; each wait step's turn (the park, the finding)
 * is a span; a run started outside any span stays in its first execution's
 * trace, which its first commit stores; and a stored context is never
 * replaced.
 */
import { context, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { storedContext as storedTraceContext, useTracingSdk } from '../helpers/tracing.js';

const db = useTestDatabase({ max: 12 });

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

const storedContext = (scope: string, key: string) => storedTraceContext(db, scope, key);

describe('with the SDK registered', () => {
  const { exporter, tracer, byName, one, parentOf } = useTracingSdk();
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
