/** Events sent to runs. (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { bigint, index, primaryKey, text } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

/**
 * Events sent to runs: one mailbox per (run, topic), first in, first out.
 * A send is keyed by the sender's idempotency key (the same key twice
 * delivers once; with another payload it is a mismatch); a wait consumes
 * the oldest unconsumed message in the transaction that records it as the
 * waiting step's outcome, so a message is consumed once.
 */
export const mailbox = stepkeySchema.table(
  'mailbox',
  {
    scope: text('scope').notNull(),
    runKey: text('run_key').notNull(),
    topic: text('topic').notNull(),
    senderKey: text('sender_key').notNull(),
    seq: bigint('seq', { mode: 'number' }).generatedAlwaysAsIdentity(),
    fingerprint: text('fingerprint').notNull(),
    payload: text('payload').notNull(),
    sentAt: at('sent_at').notNull().defaultNow(),
    consumedAt: at('consumed_at'),
    /** The key of the step that consumed it. */
    consumedBy: text('consumed_by'),
  },
  (t) => [
    primaryKey({ name: 'mailbox_pkey', columns: [t.scope, t.runKey, t.topic, t.senderKey] }),
    index('mailbox_unconsumed_idx').on(t.scope, t.runKey, t.topic, t.seq).where(sql`${t.consumedAt} is null`),
  ],
);
