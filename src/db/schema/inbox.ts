/** Consumer-side dedupe of effects. (See index.ts for the whole schema.) */
import { index, primaryKey, text } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

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
