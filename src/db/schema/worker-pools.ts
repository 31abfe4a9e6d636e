/** Liveness of worker processes. (See index.ts for the whole schema.) */
import { integer, primaryKey, text } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

export const workerPools = stepkeySchema.table('worker_pools', {
  poolId: text('pool_id').primaryKey(),
  hostname: text('hostname').notNull(),
  pid: integer('pid').notNull(),
  startedAt: at('started_at').notNull().defaultNow(),
  lastBeatAt: at('last_beat_at').notNull().defaultNow(),
  stoppedAt: at('stopped_at'),
  /** Set when other workers declared the pool dead and unlocked its jobs. */
  unlockedAt: at('unlocked_at'),
});
