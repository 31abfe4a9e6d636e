/** Step limits: their settings, partitions and slots. (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { bigint, check, doublePrecision, index, integer, primaryKey, text, uuid } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

/**
 * Step limits (see src/flow/define-limit.ts): an outside provider's rate and
 * concurrency, shared by every run in every process.
 *
 * `limits` and `limit_partitions` are global by nature — a provider's limit is
 * shared by every scope — and, like the queues' rows, the documented exception
 * to "every stepkey table leads with scope". A limit's row holds its settings
 * (the newest definition to start writes them; acquire reads them from here).
 * A partition's row holds its rate bucket and how many slots it has granted:
 * it is the row under whose lock a step takes a token or a slot.
 */
export const limits = stepkeySchema.table(
  'limits',
  {
    name: text('name').primaryKey(),
    /** Steps executing at once (null: no bound). */
    concurrency: integer('concurrency'),
    /** At most rate_limit starts per rate_period_ms, as a token bucket of rate_limit tokens (null: no rate). */
    rateLimit: integer('rate_limit'),
    ratePeriodMs: integer('rate_period_ms'),
    writtenAt: at('written_at').notNull().defaultNow(),
  },
  (t) => [
    check(
      'limits_settings_check',
      sql`(${t.rateLimit} is null) = (${t.ratePeriodMs} is null) and (${t.rateLimit} is null or (${t.rateLimit} > 0 and ${t.ratePeriodMs} > 0)) and (${t.concurrency} is null or ${t.concurrency} > 0) and (${t.concurrency} is not null or ${t.rateLimit} is not null)`,
    ),
  ],
);

export const limitPartitions = stepkeySchema.table(
  'limit_partitions',
  {
    limitName: text('limit_name').notNull(),
    partition: text('partition').notNull(),
    /** Slots held now: one per limit_slots row of this partition. */
    held: integer('held').notNull().default(0),
    /** The rate bucket: tokens left at refilled_at (null: the limit has no rate). */
    tokens: doublePrecision('tokens'),
    refilledAt: at('refilled_at'),
    /** Tokens and slots granted so far. */
    granted: bigint('granted', { mode: 'number' }).notNull().default(0),
  },
  (t) => [primaryKey({ name: 'limit_partitions_pkey', columns: [t.limitName, t.partition] }), check('limit_partitions_held_check', sql`${t.held} >= 0`)],
);

/**
 * One row per concurrency slot held: by a run, for one of its steps, under
 * the run's lease token (a takeover keeps the slot and writes its new token).
 * Given back in the commit that records the step, or — by the ledger trigger
 * of migration 0008 — when the run ends, fails, is cancelled or parks.
 */
export const limitSlots = stepkeySchema.table(
  'limit_slots',
  {
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    limitName: text('limit_name').notNull(),
    partition: text('partition').notNull(),
    /** The step instance holding it. */
    step: text('step').notNull(),
    token: uuid('token').notNull(),
    grantedAt: at('granted_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ name: 'limit_slots_pkey', columns: [t.scope, t.key, t.limitName, t.partition] }),
    index('limit_slots_partition_idx').on(t.limitName, t.partition),
  ],
);
