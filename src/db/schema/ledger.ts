/** The ledger: one row per key (an API request, a workflow run, an effect). (See index.ts for the whole schema.) */
import { sql } from 'drizzle-orm';
import { boolean, check, index, integer, primaryKey, text, uuid } from 'drizzle-orm/pg-core';
import { stepkeySchema, at } from './stepkey-schema.js';

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
    /** What the keys under this row derive from (a run's or an effect's root); null on rows from before it was stored. */
    rootKey: text('root_key'),
    /**
     * A run's wait (see workflow/waits): what it waits for (timer, event,
     * child; later slot, limit, review), at which step, for what (an event
     * topic, a child's key) and when it is due. Kept while the run executes
     * again, until the waiting step's record commits.
     */
    waitKind: text('wait_kind'),
    waitStep: text('wait_step'),
    waitFor: text('wait_for'),
    wakeAt: at('wake_at'),
    /**
     * Two times, one meaning each: `wait_until` is when the wait itself ends
     * (a timer's time, an event's timeout, a limit's next try; null when only
     * something else ends it), `wake_at` when any sweeper may take the row —
     * the earlier of that and the run's deadline, or now once something
     * marked it due (an event, a child's end, a slot, a resolution).
     */
    waitUntil: at('wait_until'),
    /** When the run ends as deadline_exceeded if it has not ended before (null: no deadline). */
    deadlineAt: at('deadline_at'),
    /** A child run's parent run (its key in the same scope). */
    parentRun: text('parent_run'),
    /** A rerun: the run it was started from (its key, same scope) and the step it executes again from. */
    rerunOf: text('rerun_of'),
    rerunFrom: text('rerun_from'),
    /**
     * A run's W3C trace context (traceparent, then a newline and the
     * tracestate, if any) of the call that started it, when an OpenTelemetry
     * SDK was registered: later executions of the run continue that trace
     * (see telemetry/tracing.ts).
     */
    traceContext: text('trace_context'),
    /**
     * Whether the run may hold a queue slot or a limit slot: only then does
     * its end fire the flow-control triggers that give them back (migration
     * 0011). True unless the run's start knew better (a workflow with no
     * limited step, not enqueued); an entry or a slot inserted for a row
     * marked false marks it true (stepkey.flow_mark).
     */
    flow: boolean('flow').notNull().default(true),
    /** A step row's place in its run's record: the order the run recorded its steps (null on older rows). */
    seq: integer('seq'),
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
    // One check for the row's invariants, in stepkey.ledger_row_ok (migration 0012): the status and
    // the kind are known ones; a finished row always has its outcome, an in-progress row a lease;
    // a parked run holds no lease, knows what it waits for and never expires while it waits; only
    // a run carries a version and an input. One function call per written row costs about a
    // quarter of what seven CHECK expressions cost, which every write prepares again.
    check(
      'ledger_row_check',
      sql`stepkey.ledger_row_ok(${t.scope}, ${t.key}, ${t.kind}, ${t.status}, ${t.leaseToken}, ${t.lockedUntil}, ${t.outcome}, ${t.outcomeOk}, ${t.version}, ${t.input}, ${t.waitKind}, ${t.expiresAt})`,
    ),
    // Children of a root (keys claimed under it, and a run's steps from before migration 0013), for purge and inspect.
    index('ledger_children_idx').on(t.scope, t.parentKey).where(sql`${t.parentKey} is not null`),
    // Runs whose lease may have expired, for the sweeper.
    index('ledger_run_leases_idx').on(t.lockedUntil).where(sql`${t.status} = 'in_progress' and ${t.kind} = 'run'`),
    // Runs with a deadline that have not ended, by deadline: the sweep ends the ones past it.
    index('ledger_deadlines_idx').on(t.deadlineAt).where(sql`${t.deadlineAt} is not null and ${t.status} in ('in_progress', 'waiting', 'failed')`),
    // Parked runs by wake time: the sweeper's due runs are one range scan.
    index('ledger_due_idx').on(t.wakeAt).where(sql`${t.status} = 'waiting'`),
    // Runs parked on a step limit, oldest first: a slot given back wakes the first (src/flow/limits).
    index('ledger_limit_waiters_idx').on(t.waitFor, t.updatedAt).where(sql`${t.status} = 'waiting' and ${t.waitKind} = 'limit'`),
    // Child runs of a parent, for inspect, cancel and purge.
    index('ledger_child_runs_idx').on(t.scope, t.parentRun).where(sql`${t.parentRun} is not null`),
    // Reruns of a run, for inspect.
    index('ledger_reruns_idx').on(t.scope, t.rerunOf).where(sql`${t.rerunOf} is not null`),
    // Finished roots by expiry, for the purge.
    index('ledger_expiry_idx').on(t.expiresAt).where(sql`${t.parentKey} is null and ${t.expiresAt} is not null`),
    // The runs listing (src/read/sql/runs.ts), newest first; the cursor is (created_at, scope, key).
    index('ledger_runs_created_idx').on(t.createdAt, t.scope, t.key).where(sql`${t.kind} = 'run'`),
    // Runs of one workflow (and version), newest first.
    index('ledger_runs_workflow_idx').on(t.name, t.version, t.createdAt, t.scope, t.key).where(sql`${t.kind} = 'run'`),
    // Runs that ended without success: a run that completes never has an entry here.
    index('ledger_runs_unsuccessful_idx')
      .on(t.createdAt, t.scope, t.key)
      .where(
        sql`${t.kind} = 'run' and (${t.status} = 'failed' or ${t.status} = 'cancelled' or ${t.status} = 'deadline_exceeded' or (${t.status} = 'completed' and not ${t.outcomeOk}))`,
      ),
    // The same runs of one workflow, newest first: a workflow's failed runs without reading every failed run.
    index('ledger_runs_unsuccessful_workflow_idx')
      .on(t.name, t.createdAt, t.scope, t.key)
      .where(
        sql`${t.kind} = 'run' and (${t.status} = 'failed' or ${t.status} = 'cancelled' or ${t.status} = 'deadline_exceeded' or (${t.status} = 'completed' and not ${t.outcomeOk}))`,
      ),
  ],
);
