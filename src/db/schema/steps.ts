/** A run's finished steps. (See index.ts for the whole schema.) */
import { boolean, index, integer, primaryKey, text } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

/**
 * A run's finished steps, one row each, apart from the ledger: a step row is
 * written with every step, and here it is indexed twice (its key, its run)
 * and checked by its column types alone, where a ledger row is indexed by
 * twelve indexes, checked by the row function and carries the columns of
 * every kind of key (migration 0013 moved the rows here). A step's key is
 * still unique in its scope: two holders that record the same step meet on
 * the primary key, and the second one rolls back.
 */
export const steps = stepkeySchema.table(
  'steps',
  {
    scope: text('scope').notNull(),
    /** The derived key: childKey(rootKey, name). */
    key: text('key').notNull(),
    /** The run's key (in the same scope). */
    runKey: text('run_key').notNull(),
    /** The step's instance name (`name` or `name[id]`). */
    name: text('name').notNull(),
    outcome: text('outcome').notNull(),
    outcomeOk: boolean('outcome_ok').notNull(),
    attempts: integer('attempts').notNull(),
    /** Its place in the run's record (null on rows from before it was kept). */
    seq: integer('seq'),
    completedAt: at('completed_at').notNull(),
  },
  (t) => [
    primaryKey({ name: 'steps_pkey', columns: [t.scope, t.key] }),
    // A run's steps, for resume, rerun, purge and inspect.
    index('steps_run_idx').on(t.scope, t.runKey),
  ],
);
