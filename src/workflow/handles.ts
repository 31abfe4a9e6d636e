/**
 * What a workflow's `run` function receives: its validated input, a handle per
 * declared step, and a context for values that must not change on replay.
 */
import type { z } from 'zod';
import type { DrizzleTx } from '../db/connect.js';
import type { TxSql } from '../db/transaction.js';
import type { AnySchema, EventDeclarations, StepDeclarations, Workflow, WorkflowInput, WorkflowResult } from './define.js';
import type { KeyRef } from '../ledger/types.js';
import type { PreviousAttempt } from './effects/attempts.js';
import type { ChildOptions } from './waits/queued-child.js';

/** What an enqueue step records: the message's derived key (its job key and dedupe key). */
export interface Enqueued {
  key: string;
}

/** An effect as a step enqueues it (src/outbox's defineEffect makes them; the outbox registers the step kind). */
export interface StepEffectRef<Payload extends AnySchema = AnySchema> {
  readonly kind: 'stepkey.effect';
  readonly name: string;
  readonly payload: Payload;
}

interface EnqueueHandle {
  /**
   * Enqueues `effect` with `payload` in the step's transaction, as a
   * graphile-worker job keyed by the step's derived key: enqueued exactly once,
   * delivered at least once, applied once by its consumer.
   */
  enqueue<Payload extends AnySchema>(effect: StepEffectRef<Payload>, payload: z.input<Payload>, use?: StepUse): Promise<Enqueued>;
}

/** An event a waitForEvent received: its parsed payload and the sender's key. */
export interface EventReceived<Payload> {
  type: 'event';
  payload: Payload;
  /** The sender's idempotency key. */
  key: string;
}

/** A waitForEvent whose timeout came first. */
export interface EventTimedOut {
  type: 'timeout';
}

/** A run named by scope and key; with its workflow, `engine.send` is typed by the workflow's events. */
export type RunRef<W = Workflow> = KeyRef & { readonly workflow?: W };

/**
 * The waits a step can be: each parks the run — no lease, process or
 * connection held — until it is due, and is recorded like any step, so a
 * replay never waits again and what it received is received once.
 */
interface WaitHandle<Events extends EventDeclarations> {
  /** A durable timer: the run parks and continues `ms` from the first time it got here (never restarted). */
  sleep(ms: number, use?: StepUse): Promise<void>;
  /** A durable timer until `date`; a date in the past continues at once. */
  sleepUntil(date: Date, use?: StepUse): Promise<void>;
  /**
   * Waits for an event sent to this run on `topic` (`engine.send`): the oldest
   * one not consumed yet, which it consumes. One sent before the run got here
   * is waiting for it.
   */
  waitForEvent<T extends keyof Events & string>(topic: T, options?: StepUse): Promise<EventReceived<z.output<Events[T]>>>;
  /** With a timeout: whichever of the event and the timeout is recorded first is the outcome, on every replay. */
  waitForEvent<T extends keyof Events & string>(
    topic: T,
    options: StepUse & { timeoutMs: number },
  ): Promise<EventReceived<z.output<Events[T]>> | EventTimedOut>;
  /**
   * Starts a child run (same scope, keyed by this step's key) and waits for
   * its result, holding nothing while it runs. A child that did not complete
   * (errored, failed, cancelled) rejects with a ChildRunError. With
   * `{ queue }` the child waits on that queue for a slot before it starts
   * (counted by the queue's concurrency like any queued run).
   */
  child<C extends Workflow>(workflow: C, input: WorkflowInput<C>, options?: ChildOptions): Promise<WorkflowResult<C>>;
  /** Starts a child run and returns its ref at once; it runs on its own (see docs/waits.md on forgotten children). `{ queue }` as for child. */
  startChild<C extends Workflow>(workflow: C, input: WorkflowInput<C>, options?: ChildOptions): Promise<RunRef<C>>;
}

/** One more use of a step in the same run needs its own stable discriminator. */
export interface StepUse {
  /** e.g. the SKU of the item a loop step works on; never a counter or a position. */
  id?: string;
}

export interface TxContext {
  /** The step's transaction, for raw SQL (postgres.js). */
  sql: TxSql;
  /** The step's derived idempotency key. */
  key: string;
  /** 1 on the first attempt. */
  attempt: number;
}

export interface CallContext {
  /** The step's derived idempotency key: send it downstream as its Idempotency-Key. */
  key: string;
  /** Aborted when the attempt times out or the run must stop. */
  signal: AbortSignal;
  /** This attempt's number, counted in the ledger: it goes on after a takeover or a resume (1 on the first ever). */
  attempt: number;
  /** How the earlier attempts ended: failed (with the error), or unknown — they may have reached the callee. */
  previous: PreviousAttempt[];
}

/** The JSON form of a value, as a step without a schema returns it (Dates become strings). */
export type Jsonified<T> = T extends Date
  ? string
  : T extends string | number | boolean | null | undefined
    ? T
    : T extends (...args: never[]) => unknown
      ? never
      : T extends readonly (infer U)[]
        ? Jsonified<U>[]
        : T extends object
          ? { [K in keyof T as T[K] extends (...args: never[]) => unknown ? never : K]: Jsonified<T[K]> }
          : never;

/** Handle of a step with an output schema: the function returns its input form, the step its parsed form. */
export interface SchemaStepHandle<Output extends AnySchema, Events extends EventDeclarations = EventDeclarations>
  extends EnqueueHandle,
    WaitHandle<Events> {
  /** Runs `fn` in the step's transaction: its writes and the recorded output commit together, exactly once. */
  tx(fn: (db: DrizzleTx, context: TxContext) => Promise<z.input<Output>>, use?: StepUse): Promise<z.output<Output>>;
  /** Runs `fn` outside any transaction (at least once; the callee dedupes on `key`), then records its output. */
  call(fn: (context: CallContext) => Promise<z.input<Output>>, use?: StepUse): Promise<z.output<Output>>;
}

/** Handle of a step without a schema: its result must be JSON and comes back in JSON form. */
export interface JsonStepHandle<Events extends EventDeclarations = EventDeclarations> extends EnqueueHandle, WaitHandle<Events> {
  tx<T>(fn: (db: DrizzleTx, context: TxContext) => Promise<T>, use?: StepUse): Promise<Jsonified<T>>;
  call<T>(fn: (context: CallContext) => Promise<T>, use?: StepUse): Promise<Jsonified<T>>;
}

export type StepHandle<Output, Events extends EventDeclarations = EventDeclarations> = Output extends AnySchema
  ? SchemaStepHandle<Output, Events>
  : JsonStepHandle<Events>;

export type StepHandles<Steps extends StepDeclarations, Events extends EventDeclarations = EventDeclarations> = {
  readonly [K in keyof Steps]: StepHandle<Steps[K]['output'], Events>;
};

export interface RunContext {
  readonly scope: string;
  /** The caller's key of this run. */
  readonly key: string;
  /** sha256 of the scope and key: the parent of every step key. */
  readonly rootKey: string;
  readonly workflow: string;
  readonly version: number;
  /** Aborted when this process must stop the run (lease lost, cancelled, shutting down). */
  readonly signal: AbortSignal;
  /** The time, recorded on first use so that a resumed run sees the same value. One per label. */
  now(label?: string): Date;
  /** A random UUID, recorded on first use. One per label. */
  uuid(label?: string): string;
}

export interface RunArguments<Input, Steps extends StepDeclarations, Events extends EventDeclarations = EventDeclarations> {
  input: Input;
  steps: StepHandles<Steps, Events>;
  ctx: RunContext;
}
