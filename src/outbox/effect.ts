/**
 * Effects: what leaves the system — emails, webhooks, published events. An
 * effect is enqueued as a graphile-worker job in the transaction that records
 * it (exactly once), delivered at least once, and applied once by its
 * consumer, which dedupes on the message's derived key in an inbox table
 * written in the same transaction as the effect's own work.
 *
 *   export const sendEmail = defineEffect({
 *     name: 'email.send',
 *     payload: z.object({ to: z.string().email(), subject: z.string() }),
 *     async handler(payload, { db, key }) { … },
 *   });
 */
import type { z } from 'zod';
import type { DrizzleTx } from '../db/connect.js';
import type { TxSql } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';

export interface EffectContext {
  /** The message's derived key: the consumer's dedupe key and the receiver's Idempotency-Key. */
  key: string;
  /** The scope the effect was enqueued in (tenant, caller). */
  scope: string;
  /** The inbox transaction: writes here commit together with the inbox row. */
  sql: TxSql;
  db: DrizzleTx;
  /** 1 on the first delivery. */
  attempt: number;
  /** Aborted when the worker shuts down. */
  signal: AbortSignal;
}

export interface EffectOptions<Payload extends z.ZodType> {
  /** Task name in graphile-worker, e.g. 'email.send'. */
  name: string;
  payload: Payload;
  /** Applies the effect. Throw to retry; throw an error with retryable === false to fail for good. */
  handler: (payload: z.output<Payload>, context: EffectContext) => Promise<void>;
  /**
   * Deliveries before the job fails for good (default 10: nine retries over
   * about 3.6 hours — e¹ + … + e⁹ seconds of backoff, see retryHorizonMs).
   */
  maxAttempts?: number;
  /** Inbox consumer name (default: the effect's name). */
  consumer?: string;
  /** A graphile-worker queue to run these jobs serially in (default: none). */
  queue?: string;
}

export interface Effect<Payload extends z.ZodType = z.ZodType> {
  readonly kind: 'stepkey.effect';
  readonly name: string;
  readonly payload: Payload;
  readonly handler: (payload: z.output<Payload>, context: EffectContext) => Promise<void>;
  readonly maxAttempts: number;
  readonly consumer: string;
  readonly queue: string | undefined;
}

const namePattern = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;

export function defineEffect<Payload extends z.ZodType>(options: EffectOptions<Payload>): Effect<Payload> {
  const where = `Effect '${String(options?.name)}'`;
  if (typeof options?.name !== 'string' || !namePattern.test(options.name)) {
    throw new StepkeyError('definition_error', `${where}: the name must be 1–128 letters, digits or . _ : / - (e.g. 'email.send').`);
  }
  if (!options.payload || typeof (options.payload as { safeParse?: unknown }).safeParse !== 'function') {
    throw new StepkeyError('definition_error', `${where}: payload must be a zod schema.`);
  }
  if (typeof options.handler !== 'function') throw new StepkeyError('definition_error', `${where}: handler must be a function.`);
  const maxAttempts = options.maxAttempts ?? 10;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 32_767) {
    throw new StepkeyError('definition_error', `${where}: maxAttempts must be a whole number from 1 to 32767.`);
  }
  return Object.freeze({
    kind: 'stepkey.effect' as const,
    name: options.name,
    payload: options.payload,
    handler: options.handler,
    maxAttempts,
    consumer: options.consumer ?? options.name,
    queue: options.queue,
  });
}

/**
 * The longest a message can keep being redelivered: graphile-worker waits
 * exp(min(attempt, 10)) seconds after each failed attempt. Inbox rows must
 * outlive it.
 */
export function retryHorizonMs(maxAttempts: number): number {
  let seconds = 0;
  for (let attempt = 1; attempt < maxAttempts; attempt += 1) seconds += Math.exp(Math.min(attempt, 10));
  return Math.ceil(seconds * 1000);
}
