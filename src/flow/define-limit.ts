/**
 * defineLimit: a limit on an outside provider, shared by every run in every
 * process — steps that name it (`step('charge-card.v1', { limit: payments })`)
 * take a token from its rate bucket and/or one of its concurrency slots before
 * their body runs, and park (no lease, no connection) when they cannot.
 *
 *   rateLimit     at most `limit` step starts per `periodMs` (a token bucket of
 *                 `limit` tokens; with partitionBy, one bucket per partition)
 *   concurrency   steps executing at once, over the whole limit (no partitionBy)
 *   partitionBy   the partition of a run (an account, a merchant), from its input
 *   perPartition  `{ concurrency }`: steps one partition may execute at once —
 *                 spelled as a queue's (defineQueue); needs partitionBy
 *
 * The spelling of earlier releases, `concurrency` beside `partitionBy` (which
 * meant slots per partition), is refused with an error naming the new one:
 * it is never read as either meaning.
 *
 * A limit is registered with the engine (`createEngine({ limits })`); the
 * engine writes its settings to the limit's row before its first step takes
 * from it, and acquire reads them from there (src/flow/sql/limits.ts).
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertStorableText } from '../keys/validate.js';
import { MAX_PARTITION_LENGTH, rateLimitOf, type RateLimit } from './define-queue.js';

export interface LimitPartitionContext {
  scope: string;
  /** The run's key. */
  key: string;
  /** The step instance that takes from the limit. */
  step: string;
}

interface LimitBase {
  name: string;
  rateLimit?: RateLimit;
}

/**
 * A limit's options. Without partitionBy, `concurrency` bounds the whole
 * limit; with it, slots per partition are `perPartition: { concurrency }`
 * (as a queue's), and `concurrency` is refused (by type, and at run time).
 */
export type LimitOptions<Input = any> =
  | (LimitBase & {
      /** Steps executing at once over the whole limit. */
      concurrency?: number;
      partitionBy?: undefined;
      perPartition?: undefined;
    })
  | (LimitBase & {
      /** The partition of a run (an account, a merchant), from its input: each has its own bucket and slots. */
      partitionBy: (input: Input, ctx: LimitPartitionContext) => string;
      /** Steps one partition may execute at once, as a queue's `perPartition`. */
      perPartition?: { concurrency: number };
      /** Refused beside partitionBy: write perPartition: { concurrency }. */
      concurrency?: never;
    });

export interface Limit<Input = any> {
  readonly kind: 'stepkey.limit';
  readonly name: string;
  readonly rateLimit: RateLimit | null;
  /** Slots of each partition (`perPartition.concurrency`), or of the whole limit without partitionBy; null for none. */
  readonly concurrency: number | null;
  readonly partitionBy: ((input: Input, ctx: LimitPartitionContext) => string) | undefined;
}

const limitNamePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

export function defineLimit<Input = any>(given: LimitOptions<Input>): Limit<Input> {
  // Read loosely: a caller without types may pass any of these together, and is answered by name.
  const options = given as LimitBase & {
    concurrency?: number;
    partitionBy?: (input: Input, ctx: LimitPartitionContext) => string;
    perPartition?: { concurrency: number };
  };
  const where = `Limit '${String(options?.name)}'`;
  if (typeof options?.name !== 'string' || !limitNamePattern.test(options.name)) {
    throw new StepkeyError('definition_error', `${where}: the name must be 1–128 letters, digits or . _ / -.`);
  }
  if (options.partitionBy !== undefined && typeof options.partitionBy !== 'function') {
    throw new StepkeyError('definition_error', `${where}: partitionBy must be a function (input, ctx) => string.`);
  }
  if (options.partitionBy !== undefined && options.concurrency !== undefined) {
    throw new StepkeyError(
      'definition_error',
      `${where}: concurrency: ${String(options.concurrency)} beside partitionBy is the old spelling of slots per partition; ` +
        `write perPartition: { concurrency: ${String(options.concurrency)} } (as a queue does). It is refused rather than read as a limit over every partition.`,
    );
  }
  if (options.perPartition !== undefined && options.partitionBy === undefined) {
    throw new StepkeyError(
      'definition_error',
      `${where}: perPartition needs a partitionBy; for slots over the whole limit write concurrency: ${String(options.perPartition?.concurrency)}.`,
    );
  }
  const slots = options.perPartition !== undefined ? options.perPartition?.concurrency : options.concurrency;
  const what = options.perPartition !== undefined ? 'perPartition.concurrency' : 'concurrency';
  let concurrency: number | null = null;
  if (slots !== undefined || options.perPartition !== undefined) {
    const value: unknown = slots;
    if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > 2_147_483_647) {
      throw new StepkeyError('definition_error', `${where}: ${what} must be a whole number above 0, got ${String(value)}.`);
    }
    concurrency = value;
  }
  const rateLimit = rateLimitOf(where, options.rateLimit);
  if (concurrency === null && rateLimit === null) {
    throw new StepkeyError(
      'definition_error',
      `${where}: give it a rateLimit ({ limit, periodMs }), a concurrency (perPartition: { concurrency } with partitionBy), or both.`,
    );
  }
  return Object.freeze({ kind: 'stepkey.limit' as const, name: options.name, rateLimit, concurrency, partitionBy: options.partitionBy });
}

/** The partition a step takes from: partitionBy's answer for the run's input, checked; '' without one. */
export function limitPartitionOf(limit: Limit, input: unknown, ctx: LimitPartitionContext): string {
  if (!limit.partitionBy) return '';
  let partition: unknown;
  try {
    partition = limit.partitionBy(input, ctx);
  } catch (error) {
    throw new StepkeyError(
      'invalid_input',
      `Limit '${limit.name}' (step '${ctx.step}'): partitionBy threw: ${(error as Error)?.message ?? String(error)}`,
      { cause: error },
    );
  }
  if (typeof partition !== 'string' || partition.length === 0 || partition.length > MAX_PARTITION_LENGTH) {
    throw new StepkeyError(
      'invalid_input',
      `Limit '${limit.name}' (step '${ctx.step}'): partitionBy must return a non-empty string of at most ${MAX_PARTITION_LENGTH} characters, ` +
        `got ${typeof partition === 'string' ? `a string of ${partition.length}` : typeof partition}.`,
    );
  }
  assertStorableText(partition, `Limit '${limit.name}' (step '${ctx.step}'): the partition from partitionBy`);
  return partition;
}

/** What a run parked on the limit waits for, as its ledger row records it (SQL: stepkey.limit_wait_for). */
export function limitWaitFor(limit: string, partition: string): string {
  return partition === '' ? limit : `${limit}[${partition}]`;
}
