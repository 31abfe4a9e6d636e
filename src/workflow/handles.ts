/**
 * What a workflow's `run` function receives: its validated input, a handle per
 * declared step, and a context for values that must not change on replay.
 */
import type { z } from 'zod';
import type { DrizzleTx } from '../db/connect.js';
import type { TxSql } from '../db/transaction.js';
import type { AnySchema, StepDeclarations } from './define.js';
import type { Effect } from '../outbox/effect.js';

/** What an enqueue step records: the message's derived key (its job key and dedupe key). */
export interface Enqueued {
  key: string;
}

interface EnqueueHandle {
  /**
   * Enqueues `effect` with `payload` in the step's transaction, as a
   * graphile-worker job keyed by the step's derived key: enqueued exactly once,
   * delivered at least once, applied once by its consumer.
   */
  enqueue<Payload extends AnySchema>(effect: Effect<Payload>, payload: z.input<Payload>, use?: StepUse): Promise<Enqueued>;
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
  attempt: number;
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
export interface SchemaStepHandle<Output extends AnySchema> extends EnqueueHandle {
  /** Runs `fn` in the step's transaction: its writes and the recorded output commit together, exactly once. */
  tx(fn: (db: DrizzleTx, context: TxContext) => Promise<z.input<Output>>, use?: StepUse): Promise<z.output<Output>>;
  /** Runs `fn` outside any transaction (at least once; the callee dedupes on `key`), then records its output. */
  call(fn: (context: CallContext) => Promise<z.input<Output>>, use?: StepUse): Promise<z.output<Output>>;
}

/** Handle of a step without a schema: its result must be JSON and comes back in JSON form. */
export interface JsonStepHandle extends EnqueueHandle {
  tx<T>(fn: (db: DrizzleTx, context: TxContext) => Promise<T>, use?: StepUse): Promise<Jsonified<T>>;
  call<T>(fn: (context: CallContext) => Promise<T>, use?: StepUse): Promise<Jsonified<T>>;
}

export type StepHandle<Output> = Output extends AnySchema ? SchemaStepHandle<Output> : JsonStepHandle;

export type StepHandles<Steps extends StepDeclarations> = {
  readonly [K in keyof Steps]: StepHandle<Steps[K]['output']>;
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

export interface RunArguments<Input, Steps extends StepDeclarations> {
  input: Input;
  steps: StepHandles<Steps>;
  ctx: RunContext;
}
