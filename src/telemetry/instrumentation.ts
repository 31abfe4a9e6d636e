/**
 * stepkey's instrumentation hook: the engine, the tRPC layer and the worker
 * tell it what happens, and observers subscribe — the Prometheus metrics
 * (stepkey/metrics) and, later, tracing. Nothing here depends on a
 * telemetry library, and with no observer each call is a check of an empty
 * list.
 *
 * Observers are shared through globalThis, so two copies of stepkey in one
 * process (a bundled app and its CLI) report to the same subscribers. An
 * observer that throws is unsubscribed from nothing and breaks nothing: its
 * error is swallowed.
 */

export type RunOutcome = 'completed' | 'errored' | 'failed' | 'cancelled' | 'deadline_exceeded';
export type StepOutcome = 'completed' | 'errored' | 'failed';

export interface StepkeyObserver {
  /** A run's first execution began (not a resume or a takeover). */
  runStarted?(event: { workflow: string; version: number }): void;
  /** An execution of a run ended with an outcome (a stopped execution — lease lost, shutdown — reports nothing). */
  runEnded?(event: { workflow: string; version: number; outcome: RunOutcome }): void;
  /** A step ran to an outcome here (replays report nothing): its attempts and how long they took together. */
  stepEnded?(event: { step: string; outcome: StepOutcome; attempts: number; durationMs: number }): void;
  /** A sweep took over runs whose lease had expired (or that an operator made due). */
  sweptRuns?(event: { count: number }): void;
  /** A keyed call (tRPC or stepkey/http) was answered from its stored outcome: a handler's or procedure's, or a run's. */
  replayed?(event: { via: 'procedure' | 'workflow' }): void;
  /** A keyed call (tRPC or stepkey/http) was refused or failed with this HTTP status (409, 422, 503, …). */
  answered?(event: { status: number }): void;
}

interface Hub {
  observers: StepkeyObserver[];
}

const hub: Hub = ((globalThis as Record<symbol, unknown>)[Symbol.for('stepkey.instrumentation')] ??= { observers: [] }) as Hub;

/** Subscribes an observer; returns the function that unsubscribes it. */
export function observe(observer: StepkeyObserver): () => void {
  hub.observers = [...hub.observers, observer];
  return () => {
    hub.observers = hub.observers.filter((candidate) => candidate !== observer);
  };
}

function emit<K extends keyof StepkeyObserver>(name: K, event: Parameters<NonNullable<StepkeyObserver[K]>>[0]): void {
  for (const observer of hub.observers) {
    try {
      (observer[name] as ((value: typeof event) => void) | undefined)?.call(observer, event);
    } catch {
      // Telemetry never breaks the work it observes.
    }
  }
}

/** What the engine, the tRPC layer and the worker call: one line each. */
export const instrument = {
  runStarted: (workflow: { name: string; version: number }) => {
    if (hub.observers.length) emit('runStarted', { workflow: workflow.name, version: workflow.version });
  },
  /** `state` is the engine's settled state; only outcomes are reported. */
  runEnded: (workflow: { name: string; version: number }, state: string) => {
    if (hub.observers.length && (state === 'completed' || state === 'errored' || state === 'failed' || state === 'cancelled' || state === 'deadline_exceeded')) {
      emit('runEnded', { workflow: workflow.name, version: workflow.version, outcome: state });
    }
  },
  /** Call when a step starts its first attempt; call `end` with its outcome. */
  stepBegun: (step: string) => {
    const began = hub.observers.length ? performance.now() : 0;
    return {
      end: (outcome: StepOutcome, attempts: number) => {
        if (began) emit('stepEnded', { step, outcome, attempts, durationMs: performance.now() - began });
      },
    };
  },
  sweptRuns: (count: number) => {
    if (hub.observers.length && count > 0) emit('sweptRuns', { count });
  },
  replayed: (via: 'procedure' | 'workflow') => {
    if (hub.observers.length) emit('replayed', { via });
  },
  answered: (status: number) => {
    if (hub.observers.length) emit('answered', { status });
  },
};
