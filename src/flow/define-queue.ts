/**
 * defineQueue: a named queue that runs wait on for a slot.
 *
 *   concurrency      slots of the whole queue (runs executing at once)
 *   partitionBy      the partition of a run (a tenant, an account), from its input
 *   perPartition     slots one partition may hold at once
 *   rateLimit        at most `limit` starts per `periodMs` (a token bucket of `limit` tokens)
 *
 * A queue is registered with the engine (`createEngine({ queues })`); the
 * engine writes its settings to the queue's row when it starts, and dispatch
 * reads them from there.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertStorableText } from '../keys/validate.js';

export interface PartitionContext {
  scope: string;
  key: string;
}

export interface RateLimit {
  /** Starts allowed per period; also the bucket's size (the burst). */
  limit: number;
  periodMs: number;
}

export interface QueueOptions<Input = unknown> {
  name: string;
  concurrency: number;
  partitionBy?: (input: Input, ctx: PartitionContext) => string;
  perPartition?: { concurrency: number };
  rateLimit?: RateLimit;
}

export interface Queue<Input = unknown> {
  readonly kind: 'stepkey.queue';
  readonly name: string;
  readonly concurrency: number;
  readonly perPartition: number | null;
  readonly rateLimit: RateLimit | null;
  readonly partitionBy: ((input: Input, ctx: PartitionContext) => string) | undefined;
}

const queueNamePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

/** The longest partition a partitionBy may return. */
export const MAX_PARTITION_LENGTH = 256;

function positiveInteger(where: string, what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > 2_147_483_647) {
    throw new StepkeyError('definition_error', `${where}: ${what} must be a whole number above 0, got ${String(value)}.`);
  }
  return value;
}

export function defineQueue<Input = unknown>(options: QueueOptions<Input>): Queue<Input> {
  const where = `Queue '${String(options?.name)}'`;
  if (typeof options?.name !== 'string' || !queueNamePattern.test(options.name)) {
    throw new StepkeyError('definition_error', `${where}: the name must be 1–128 letters, digits or . _ / -.`);
  }
  const concurrency = positiveInteger(where, 'concurrency', options.concurrency);
  if (options.partitionBy !== undefined && typeof options.partitionBy !== 'function') {
    throw new StepkeyError('definition_error', `${where}: partitionBy must be a function (input, ctx) => string.`);
  }
  let perPartition: number | null = null;
  if (options.perPartition !== undefined) {
    if (!options.partitionBy) {
      throw new StepkeyError('definition_error', `${where}: perPartition needs a partitionBy.`);
    }
    perPartition = positiveInteger(where, 'perPartition.concurrency', options.perPartition?.concurrency);
  }
  return Object.freeze({
    kind: 'stepkey.queue' as const,
    name: options.name,
    concurrency,
    perPartition,
    rateLimit: rateLimitOf(where, options.rateLimit),
    partitionBy: options.partitionBy,
  });
}

export function rateLimitOf(where: string, rate: RateLimit | undefined): RateLimit | null {
  if (rate === undefined) return null;
  return Object.freeze({
    limit: positiveInteger(where, 'rateLimit.limit', rate?.limit),
    periodMs: positiveInteger(where, 'rateLimit.periodMs', rate?.periodMs),
  });
}

/** Priority: a whole number in this range; higher starts first within a queue. */
export const PRIORITY_RANGE = { min: -1000, max: 1000 } as const;

export function assertValidPriority(priority: unknown): asserts priority is number {
  if (typeof priority !== 'number' || !Number.isInteger(priority) || priority < PRIORITY_RANGE.min || priority > PRIORITY_RANGE.max) {
    throw new StepkeyError(
      'invalid_options',
      `priority must be a whole number from ${PRIORITY_RANGE.min} to ${PRIORITY_RANGE.max}, got ${String(priority)}.`,
    );
  }
}

/** The run's partition: partitionBy's answer, checked; '' for a queue without partitions. */
export function partitionOf<Input>(queue: Queue<Input>, input: Input, ctx: PartitionContext): string {
  if (!queue.partitionBy) return '';
  let partition: unknown;
  try {
    partition = queue.partitionBy(input, ctx);
  } catch (error) {
    throw new StepkeyError('invalid_input', `Queue '${queue.name}': partitionBy threw: ${(error as Error)?.message ?? String(error)}`, {
      cause: error,
    });
  }
  if (typeof partition !== 'string' || partition.length === 0 || partition.length > MAX_PARTITION_LENGTH) {
    throw new StepkeyError(
      'invalid_input',
      `Queue '${queue.name}': partitionBy must return a non-empty string of at most ${MAX_PARTITION_LENGTH} characters, ` +
        `got ${typeof partition === 'string' ? `a string of ${partition.length}` : typeof partition}.`,
    );
  }
  assertStorableText(partition, `Queue '${queue.name}': the partition from partitionBy`);
  return partition;
}
