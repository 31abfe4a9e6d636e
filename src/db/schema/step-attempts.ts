/** The effect record: every attempt of a run's outside effects. (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { check, integer, primaryKey, text, uuid } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

/**
 * The effect record: one row per attempt of a step that reaches outside
 * (a call, an enqueue), keyed by its run and step. An attempt is started —
 * its row written, fenced by the run's lease — before the call is made, and
 * ended after it, only under the lease that started it. An attempt with no
 * end (its process died, its lease was taken over) or ended `unknown` (cut by
 * a timeout, an abort, a lost connection) may have reached the callee.
 * `resolution` records how an unknown outcome was settled: found by the
 * step's reconcile, found absent, given by an operator, or retried on an
 * operator's word.
 */
export const stepAttempts = stepkeySchema.table(
  'step_attempts',
  {
    scope: text('scope').notNull(),
    runKey: text('run_key').notNull(),
    /** The step's instance name (`name` or `name[id]`). */
    step: text('step').notNull(),
    attempt: integer('attempt').notNull(),
    kind: text('kind').notNull(),
    /** The run's lease token when the attempt started: only that lease may end it. */
    leaseToken: uuid('lease_token').notNull(),
    startedAt: at('started_at').notNull(),
    endedAt: at('ended_at'),
    outcome: text('outcome'),
    /** The stored error (JSON text) of an attempt that failed or was cut. */
    error: text('error'),
    resolution: text('resolution'),
    /** The output a reconcile found or an operator gave (JSON text). */
    resolvedOutput: text('resolved_output'),
    resolvedAt: at('resolved_at'),
  },
  (t) => [
    primaryKey({ name: 'step_attempts_pkey', columns: [t.scope, t.runKey, t.step, t.attempt] }),
    check('step_attempts_kind_check', sql`${t.kind} in ('call', 'enqueue')`),
    check('step_attempts_outcome_check', sql`${t.outcome} is null or ${t.outcome} in ('ok', 'failed', 'unknown')`),
    // An outcome comes with its end, and an end with its outcome.
    check('step_attempts_end_check', sql`(${t.endedAt} is null) = (${t.outcome} is null)`),
    check(
      'step_attempts_resolution_check',
      sql`${t.resolution} is null or ${t.resolution} in ('reconciled', 'absent', 'resolved', 'retried')`,
    ),
  ],
);
