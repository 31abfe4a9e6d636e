/**
 * The OpenTelemetry SDK registered for a tracing test file (tracing*.test.ts)
 * with its in-memory exporter, from the enclosing suite's start to its end,
 * and how the tests read the spans it finished.
 */
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, expect } from 'vitest';
import type { TestDatabase } from './database.js';

/** Call inside a describe: the SDK is registered before its tests and taken down after them. */
export function useTracingSdk() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const contextManager = new AsyncLocalStorageContextManager();
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
  return {
    exporter,
    tracer: () => trace.getTracer('stepkey-test'),
    byName,
    /** The one finished span named `name` (the test fails if there is not exactly one). */
    one(spans: ReadableSpan[], name: string) {
      const found = byName(spans, name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    },
    parentOf: (span: ReadableSpan) => span.parentSpanContext?.spanId,
  };
}

/** The trace context stored with a run (null: none). */
export const storedContext = async (db: () => TestDatabase, scope: string, key: string) =>
  (await db().sql<{ trace_context: string | null }[]>`select trace_context from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]
    ?.trace_context;
