/**
 * stepkey's tables, all in the `stepkey` Postgres schema.
 *
 *   ledger       one row per key: an API request, a workflow run, a step, an
 *                effect. Keyed by (scope, key); holds the fingerprint, the
 *                status, the stored outcome (text, so it replays byte for
 *                byte), the lease (locked_until + lease_token) and expiry. A
 *                run's row also holds what it needs to resume: its workflow
 *                (name), version and validated input — written in the same
 *                INSERT as its claim, so a run never exists without them.
 *   inbox        consumer-side dedupe: (consumer, message key) of every
 *                applied effect, written in the effect's own transaction.
 *   worker_pools liveness of worker processes, so that the jobs of a dead one
 *                are unlocked in seconds rather than hours.
 *
 * drizzle-kit generates the SQL in drizzle/ from this file.
 */
import { sql } from 'drizzle-orm';
import {
  boolean,
  check,
  index,
  integer,
  pgSchema,
  primaryKey,
  text,
  timestamp,
  uuid,
} from 'drizzle-orm/pg-core';

export const stepkeySchema = pgSchema('stepkey');

const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const ledger = stepkeySchema.table(
  'ledger',
  {
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    kind: text('kind').notNull(),
    name: text('name'),
    parentKey: text('parent_key'),
    fingerprint: text('fingerprint').notNull(),
    status: text('status').notNull(),
    outcome: text('outcome'),
    outcomeOk: boolean('outcome_ok'),
    outcomeCode: integer('outcome_code'),
    lastError: text('last_error'),
    version: integer('version'),
    input: text('input'),
    leaseToken: uuid('lease_token'),
    lockedUntil: at('locked_until'),
    expiresAt: at('expires_at'),
    attempts: integer('attempts').notNull().default(1),
    createdAt: at('created_at').notNull().defaultNow(),
    updatedAt: at('updated_at').notNull().defaultNow(),
    completedAt: at('completed_at'),
  },
  (t) => [
    primaryKey({ name: 'ledger_pkey', columns: [t.scope, t.key] }),
    check('ledger_status_check', sql`${t.status} in ('in_progress', 'completed', 'failed', 'cancelled')`),
    check('ledger_kind_check', sql`${t.kind} in ('request', 'run', 'step', 'effect')`),
    // A finished row always has its outcome; an in-progress row always has a lease.
    check(
      'ledger_outcome_check',
      sql`(${t.status} in ('completed', 'cancelled')) = (${t.outcome} is not null and ${t.outcomeOk} is not null)`,
    ),
    check('ledger_lease_check', sql`${t.status} <> 'in_progress' or (${t.leaseToken} is not null and ${t.lockedUntil} is not null)`),
    // Only a run carries a workflow version and an input.
    check('ledger_run_check', sql`${t.kind} = 'run' or (${t.version} is null and ${t.input} is null)`),
    // Children of a root (a run's steps), for resume, purge and inspect.
    index('ledger_children_idx').on(t.scope, t.parentKey).where(sql`${t.parentKey} is not null`),
    // Runs whose lease may have expired, for the sweeper.
    index('ledger_run_leases_idx').on(t.lockedUntil).where(sql`${t.status} = 'in_progress' and ${t.kind} = 'run'`),
    // Finished roots by expiry, for the purge.
    index('ledger_expiry_idx').on(t.expiresAt).where(sql`${t.parentKey} is null and ${t.expiresAt} is not null`),
  ],
);

export const inbox = stepkeySchema.table(
  'inbox',
  {
    consumer: text('consumer').notNull(),
    messageKey: text('message_key').notNull(),
    processedAt: at('processed_at').notNull().defaultNow(),
    expiresAt: at('expires_at').notNull(),
  },
  (t) => [
    primaryKey({ name: 'inbox_pkey', columns: [t.consumer, t.messageKey] }),
    index('inbox_expiry_idx').on(t.expiresAt),
  ],
);

export const workerPools = stepkeySchema.table('worker_pools', {
  poolId: text('pool_id').primaryKey(),
  hostname: text('hostname').notNull(),
  pid: integer('pid').notNull(),
  startedAt: at('started_at').notNull().defaultNow(),
  lastBeatAt: at('last_beat_at').notNull().defaultNow(),
  stoppedAt: at('stopped_at'),
});
