/** Queues: their settings, partitions and entries. (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { bigint, boolean, check, doublePrecision, index, integer, primaryKey, text, uuid } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

/**
 * Flow control (see src/flow): queues and the runs queued on them.
 *
 * `queues` and `queue_partitions` are global by nature — a queue is shared by
 * every scope that enqueues on it — and are the documented exception to
 * "every stepkey table leads with scope". A queue's row holds its settings
 * (the newest definition to start writes them; dispatch reads them from here,
 * so two releases running side by side agree) and its rate bucket; it is the
 * lock under which dispatch decides. A partition's row records when it was
 * last served, for fairness.
 */
export const queues = stepkeySchema.table(
  'queues',
  {
    name: text('name').primaryKey(),
    concurrency: integer('concurrency').notNull(),
    /** Slots one partition may hold at once (null: no bound below the queue's). */
    perPartition: integer('per_partition'),
    /** Rate limit: at most rate_limit starts per rate_period_ms, as a token bucket of rate_limit tokens. */
    rateLimit: integer('rate_limit'),
    ratePeriodMs: integer('rate_period_ms'),
    /** The bucket: tokens left at refilled_at. */
    tokens: doublePrecision('tokens'),
    refilledAt: at('refilled_at'),
    writtenAt: at('written_at').notNull().defaultNow(),
  },
  (t) => [
    check('queues_concurrency_check', sql`${t.concurrency} > 0 and (${t.perPartition} is null or ${t.perPartition} > 0)`),
    check(
      'queues_rate_check',
      sql`(${t.rateLimit} is null) = (${t.ratePeriodMs} is null) and (${t.rateLimit} is null or (${t.rateLimit} > 0 and ${t.ratePeriodMs} > 0))`,
    ),
  ],
);

export const queuePartitions = stepkeySchema.table(
  'queue_partitions',
  {
    queue: text('queue').notNull(),
    partition: text('partition').notNull(),
    lastServedAt: at('last_served_at'),
    /** Slots granted to this partition so far. */
    served: bigint('served', { mode: 'number' }).notNull().default(0),
  },
  (t) => [primaryKey({ name: 'queue_partitions_pkey', columns: [t.queue, t.partition] })],
);

/**
 * One row per run on a queue, from its enqueue until it ends (it is deleted
 * then, in the transaction of its end, by the ledger trigger in migration
 * 0007, and with its run's row when that is purged). `holding` is its slot:
 * granted in the same statement that gives the run its lease (granted_token),
 * kept through a sweeper's takeover (the slot belongs to the run, and every
 * ledger write that ends or parks a run is fenced by its lease token), given
 * back when the run ends, fails, is cancelled or parks. A run that fails
 * keeps its entry, `failed` (migration 0009): whatever resumes it puts it back
 * in line for a slot.
 */
export const queueEntries = stepkeySchema.table(
  'queue_entries',
  {
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    queue: text('queue').notNull(),
    partition: text('partition').notNull(),
    priority: integer('priority').notNull().default(0),
    seq: bigint('seq', { mode: 'number' }).generatedAlwaysAsIdentity(),
    enqueuedAt: at('enqueued_at').notNull().defaultNow(),
    /** Not dispatched before this (enqueue's delayMs). */
    notBefore: at('not_before').notNull().defaultNow(),
    holding: boolean('holding').notNull().default(false),
    grantedAt: at('granted_at'),
    /** The lease token the slot was granted with (a takeover keeps the slot under its new token). */
    grantedToken: uuid('granted_token'),
    /** The run failed (resumable): no slot, not dispatched, until a resume puts it back in line (lifecycle/requeue.ts). */
    failed: boolean('failed').notNull().default(false),
  },
  (t) => [
    primaryKey({ name: 'queue_entries_pkey', columns: [t.scope, t.key] }),
    check('queue_entries_priority_check', sql`${t.priority} between -1000 and 1000`),
    // Queued runs of a queue, in dispatch order within a partition (a failed run is not queued until it is resumed).
    index('queue_entries_waiting_idx').on(t.queue, t.partition, t.priority.desc(), t.seq).where(sql`not ${t.holding} and not ${t.failed}`),
    // Slots held, counted per queue and partition.
    index('queue_entries_holding_idx').on(t.queue, t.partition).where(sql`${t.holding}`),
  ],
);
