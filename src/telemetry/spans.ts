/**
 * The spans stepkey makes (see tracing.ts for when and how), their names and
 * attributes. Every span has `stepkey.scope`, `stepkey.key` (the key of what
 * the span is about: the run, the step's derived key, the message key) and,
 * where there is one, `stepkey.attempt`:
 *
 *   stepkey.run <workflow>        one execution of a run (internal)
 *     stepkey.workflow, stepkey.workflow.version, stepkey.attempt (the run's
 *     attempt: takeovers, resumes and retries count; a wake from a wait does
 *     not), stepkey.continued (a later execution, child of the stored
 *     context); at the end stepkey.outcome (completed, errored, failed,
 *     cancelled, waiting, stopped) and stepkey.stop_reason
 *   stepkey.step <step>           one attempt of a tx, call or enqueue step (internal)
 *     stepkey.run, stepkey.step (the instance name, `name[id]`),
 *     stepkey.step.kind, stepkey.attempt; at the end stepkey.outcome
 *     (completed, errored, retry)
 *   stepkey.step <step>           a wait step's turn: sleep, waitForEvent, child,
 *     startChild (internal), once in each execution that reaches it — the
 *     one that parks and the one that finds the wait over; the same
 *     attributes (stepkey.attempt 1), and at the end stepkey.outcome
 *     (parked, completed, errored), stepkey.wait.for (an event's topic, a
 *     child's key) and stepkey.wait.until (when a parked wait is due, ISO 8601)
 *   stepkey.enqueue <effect>      an effect's job added with its ledger row (producer)
 *     stepkey.effect, stepkey.run and stepkey.step (in a workflow)
 *   stepkey.deliver <effect>      one delivery of an effect's job by a worker (consumer)
 *     stepkey.effect, stepkey.attempt (the job's attempt), stepkey.job; at
 *     the end stepkey.outcome (applied, duplicate)
 */
import type { SpanAttributes, SpanEnding, SpanSpec } from './tracing.js';

export interface RunSpanInfo {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  /** The run's attempt (its row's attempts); 1 for a new run. */
  attempt: number;
  /** A later execution: the trace context stored with the run (null on rows stored without one). */
  continues?: string | null | undefined;
}

export function runSpan(run: RunSpanInfo): SpanSpec {
  return {
    name: `stepkey.run ${run.workflow}`,
    kind: 'internal',
    attributes: {
      'stepkey.scope': run.scope,
      'stepkey.key': run.key,
      'stepkey.workflow': run.workflow,
      'stepkey.workflow.version': run.version,
      'stepkey.attempt': run.attempt,
      'stepkey.continued': run.continues !== undefined,
    },
    continues: run.continues,
  };
}

/** What a run's execution ended with: its settled state; failed and errored runs end as errors. */
export function runEnding(settled: { state: string; reason?: unknown; error?: { message?: string } }): SpanEnding {
  const reason = settled.state === 'stopped' && typeof settled.reason === 'string' ? settled.reason : undefined;
  const attributes: SpanAttributes = { 'stepkey.outcome': settled.state, 'stepkey.stop_reason': reason };
  if (settled.state === 'failed' || settled.state === 'errored') {
    return { attributes, error: settled.error?.message ?? settled.state };
  }
  return { attributes };
}

/** The wait steps, by the handle method that makes them (sleepUntil is a sleep). */
export type WaitStepKind = 'sleep' | 'waitForEvent' | 'child' | 'startChild';

export interface StepSpanInfo {
  scope: string;
  run: string;
  step: string;
  kind: 'tx' | 'call' | 'enqueue' | WaitStepKind;
  /** The step's derived key. */
  key: string;
  attempt: number;
}

export function stepSpan(step: StepSpanInfo): SpanSpec {
  return {
    name: `stepkey.step ${step.step}`,
    kind: 'internal',
    attributes: {
      'stepkey.scope': step.scope,
      'stepkey.key': step.key,
      'stepkey.run': step.run,
      'stepkey.step': step.step,
      'stepkey.step.kind': step.kind,
      'stepkey.attempt': step.attempt,
    },
  };
}

/** What a step attempt came to: an outcome recorded (completed, or errored with a stored error), or an error to retry. */
export function stepEnding(tried: { done: boolean; error?: unknown }): SpanEnding {
  const outcome = !tried.done ? 'retry' : tried.error === undefined ? 'completed' : 'errored';
  return { attributes: { 'stepkey.outcome': outcome }, error: tried.error };
}

/** What a wait step's turn came to: the run parked on it (what for, until when), or its outcome was recorded. */
export function waitEnding(decision: { park?: { for: string | null; untilMs: number | null }; finish?: { ok: boolean } }): SpanEnding {
  const { park, finish } = decision;
  const outcome = park ? 'parked' : finish?.ok === false ? 'errored' : 'completed';
  return {
    attributes: {
      'stepkey.outcome': outcome,
      'stepkey.wait.for': park?.for ?? undefined,
      'stepkey.wait.until': park?.untilMs != null ? new Date(park.untilMs).toISOString() : undefined,
    },
  };
}

export interface EnqueueSpanInfo {
  scope: string;
  /** The message key (job key, inbox key). */
  key: string;
  effect: string;
  run?: string;
  step?: string;
  attempt?: number;
}

export function enqueueSpan(message: EnqueueSpanInfo): SpanSpec {
  return {
    name: `stepkey.enqueue ${message.effect}`,
    kind: 'producer',
    attributes: {
      'stepkey.scope': message.scope,
      'stepkey.key': message.key,
      'stepkey.effect': message.effect,
      'stepkey.run': message.run,
      'stepkey.step': message.step,
      'stepkey.attempt': message.attempt,
    },
  };
}

export interface DeliverySpanInfo {
  scope: string | undefined;
  key: string | undefined;
  effect: string;
  attempt: number;
  job: string;
  /** The trace context the envelope carries (where it was enqueued). */
  continues: string | null | undefined;
}

export function deliveryEnding(result: 'applied' | 'duplicate'): SpanEnding {
  return { attributes: { 'stepkey.outcome': result } };
}

export function deliverySpan(delivery: DeliverySpanInfo): SpanSpec {
  return {
    name: `stepkey.deliver ${delivery.effect}`,
    kind: 'consumer',
    attributes: {
      'stepkey.scope': delivery.scope,
      'stepkey.key': delivery.key,
      'stepkey.effect': delivery.effect,
      'stepkey.attempt': delivery.attempt,
      'stepkey.job': delivery.job,
    },
    continues: delivery.continues,
  };
}
