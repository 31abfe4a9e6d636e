/**
 * stepkey's OpenTelemetry traces, through `@opentelemetry/api` (an optional
 * peer): a span per execution of a run, per step attempt, per effect enqueue
 * and per outbox delivery. The engine, the outbox and the worker call the
 * hooks at the bottom, one line each.
 *
 * Nothing is built unless the app registered an SDK: the API keeps what an
 * SDK registers on globalThis, so each hook first looks there (a property
 * read) and, with no tracer provider registered, runs the work as it is —
 * the API is not even loaded. With `@opentelemetry/api` not installed the
 * hooks do the same.
 *
 * Trace context crosses processes as W3C trace context text
 * (`traceparent`, then `\n` and the `tracestate` when there is one), written
 * and read here, so it needs no propagator to be registered:
 *   - a new run's row stores the context of the call that started it
 *     (ledger.trace_context); an execution that continues the run later —
 *     taken over by a sweeper, woken from a wait, resumed, retried — is a
 *     child of that stored context, so every execution of a run sits in the
 *     trace of the call that started it. The span active where it was
 *     continued (a resume call, the child run that woke it), if any, is
 *     linked. A run started outside any span stores its first execution's
 *     own context instead, with that execution's first commit, so its later
 *     executions join the first one's trace;
 *   - an effect's job envelope carries the context active where it was
 *     enqueued (the enqueue step's attempt), and its delivery is a child of it.
 */
import { createRequire } from 'node:module';
import type * as Otel from '@opentelemetry/api';

type Api = typeof Otel;
export type SpanAttributes = Record<string, string | number | boolean | undefined>;

/** Where the API keeps what an SDK registered (its global for major version 1). */
const API_GLOBAL = Symbol.for('opentelemetry.js.api.1');

let api: Api | null | undefined;

/** The API, when an SDK has registered a tracer provider; undefined otherwise (nothing is loaded). */
function tracingApi(): Api | undefined {
  const registered = (globalThis as Record<symbol, { trace?: unknown } | undefined>)[API_GLOBAL];
  if (!registered?.trace) return undefined;
  if (api === undefined) {
    try {
      api = createRequire(import.meta.url)('@opentelemetry/api') as Api;
    } catch {
      api = null;
    }
  }
  return api ?? undefined;
}

/** true when an SDK is registered: spans are built. */
export function tracingEnabled(): boolean {
  return tracingApi() !== undefined;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The active span's context as W3C trace context text, or null (no SDK, no valid span). */
export function activeTraceContext(): string | null {
  const otel = tracingApi();
  if (!otel) return null;
  const span = otel.trace.getSpan(otel.context.active());
  if (!span) return null;
  const context = span.spanContext();
  if (!otel.trace.isSpanContextValid(context)) return null;
  const flags = (context.traceFlags & 0xff).toString(16).padStart(2, '0');
  const state = context.traceState?.serialize();
  return `00-${context.traceId}-${context.spanId}-${flags}${state ? `\n${state}` : ''}`;
}

/** Parses trace context text written by activeTraceContext (or a plain traceparent); undefined when it is not one. */
function parseTraceContext(otel: Api, text: string | null | undefined): Otel.SpanContext | undefined {
  if (!text) return undefined;
  const [parent, state] = text.split('\n', 2);
  const match = TRACEPARENT.exec(parent ?? '');
  if (!match) return undefined;
  const context: Otel.SpanContext = {
    traceId: match[1]!,
    spanId: match[2]!,
    traceFlags: Number.parseInt(match[3]!, 16),
    isRemote: true,
    ...(state ? { traceState: otel.createTraceState(state) } : {}),
  };
  return otel.trace.isSpanContextValid(context) ? context : undefined;
}

/** Adds the active context to outgoing headers through the app's propagator (a no-op without an SDK). */
export function injectTraceHeaders(headers: Record<string, string>): Record<string, string> {
  const otel = tracingApi();
  if (otel) otel.propagation.inject(otel.context.active(), headers);
  return headers;
}

export interface SpanSpec {
  name: string;
  kind: 'internal' | 'producer' | 'consumer';
  attributes: SpanAttributes;
  /**
   * Stored trace context the span continues: it is the span's parent (the
   * active span, if any, is linked). Absent or unreadable: the active span is
   * the parent.
   */
  continues?: string | null | undefined;
}

/** How the work ended, for the span: an error (or its message) sets the span's status; attributes are added. */
export interface SpanEnding {
  error?: unknown;
  attributes?: SpanAttributes;
}

const kinds = { internal: 0, producer: 3, consumer: 4 } as const satisfies Record<SpanSpec['kind'], Otel.SpanKind>;

/**
 * Runs `work` in a span (active while it runs) when an SDK is registered;
 * otherwise runs it as it is. `spec` is called only when a span is built.
 * `ended` reads the work's result; a thrown error ends the span as an error.
 */
export async function inSpan<T>(spec: () => SpanSpec, work: () => Promise<T>, ended?: (value: T) => SpanEnding | undefined): Promise<T> {
  const otel = tracingApi();
  if (!otel) return work();
  let span: Otel.Span;
  let active: Otel.Context;
  try {
    const { name, kind, attributes, continues } = spec();
    const current = otel.context.active();
    const stored = parseTraceContext(otel, continues);
    const links: Otel.Link[] = [];
    let parent = current;
    if (stored) {
      parent = otel.trace.setSpanContext(otel.ROOT_CONTEXT, stored);
      const caller = otel.trace.getSpan(current)?.spanContext();
      if (caller && otel.trace.isSpanContextValid(caller) && caller.spanId !== stored.spanId) links.push({ context: caller });
    }
    span = otel.trace.getTracer('stepkey').startSpan(name, { kind: kinds[kind], attributes: defined(attributes), links }, parent);
    active = otel.trace.setSpan(parent, span);
  } catch {
    // Telemetry never breaks the work it observes.
    return work();
  }
  let value: T;
  try {
    value = await otel.context.with(active, work);
  } catch (error) {
    finish(otel, span, { error });
    throw error;
  }
  let ending: SpanEnding | undefined;
  try {
    ending = ended?.(value);
  } catch {
    ending = undefined;
  }
  finish(otel, span, ending);
  return value;
}

function finish(otel: Api, span: Otel.Span, ending: SpanEnding | undefined): void {
  try {
    if (ending?.attributes) span.setAttributes(defined(ending.attributes));
    const error = ending?.error;
    if (error !== undefined) {
      if (error instanceof Error) span.recordException(error);
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  } catch {
    // Telemetry never breaks the work it observes.
  }
}

function defined(attributes: SpanAttributes): Otel.Attributes {
  const result: Otel.Attributes = {};
  for (const [name, value] of Object.entries(attributes)) if (value !== undefined) result[name] = value;
  return result;
}
