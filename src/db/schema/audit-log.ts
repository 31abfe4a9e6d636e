/** One row per operator action. (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { bigint, boolean, check, index, primaryKey, text } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

export const auditLog = stepkeySchema.table(
  'audit_log',
  {
    /** The run's scope; for a job, the scope in its payload ('' when it has none). */
    scope: text('scope').notNull(),
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    at: at('at').notNull().defaultNow(),
    action: text('action').notNull(),
    /** Who asked: the dashboard's actor, the CLI's user, the app. */
    actor: text('actor').notNull(),
    /** Through what: 'dashboard', 'cli' or 'api'. */
    source: text('source').notNull(),
    /** The run's key, or the job's message key. */
    key: text('key'),
    jobId: text('job_id'),
    /** Whether it changed anything (false: the run had already ended, the job was locked). */
    applied: boolean('applied').notNull(),
    /** JSON: the reason given, the status before. */
    detail: text('detail'),
  },
  (t) => [
    primaryKey({ name: 'audit_log_pkey', columns: [t.scope, t.id] }),
    check('audit_log_action_check', sql`${t.action} in ('cancel', 'resume', 'retry_job', 'resolve', 'rerun')`),
    // A run's actions, for its page.
    index('audit_log_key_idx').on(t.scope, t.key).where(sql`${t.key} is not null`),
    // The newest actions across scopes.
    index('audit_log_at_idx').on(t.at),
  ],
);
