/**
 * stepkey's tables, all in the `stepkey` Postgres schema.
 *
 *   ledger       one row per key: an API request, a workflow run, an effect
 *                (a run's finished steps are in `steps`). Keyed by (scope, key); holds the fingerprint, the
 *                status, the stored outcome (text, so it replays byte for
 *                byte), the lease (locked_until + lease_token) and expiry. A
 *                run's row also holds what it needs to resume: its workflow
 *                (name), version and validated input — written in the same
 *                INSERT as its claim, so a run never exists without them —
 *                and its root key, derived from an identity minted at that
 *                claim, which every step key derives from.
 *   steps        one row per finished step of a run: its derived key, its
 *                run, its name, its stored outcome and its place in the run's
 *                record. Written with the step's own transaction, fenced by
 *                the run's lease (workflow/sql/step-rows.ts).
 *   inbox        consumer-side dedupe: (consumer, message key) of every
 *                applied effect, written in the effect's own transaction.
 *   step_attempts every attempt of a run's outside effects (call and enqueue
 *                steps): started before the call, ended after it, under the
 *                run's lease (see workflow/effects).
 *   worker_pools liveness of worker processes, so that the jobs of a dead one
 *                are unlocked in seconds rather than hours.
 *   audit_log    one row per operator action (cancel, resume, retry a job,
 *                resolve a run that needs review, rerun from a step),
 *                written in the transaction of the change it records.
 *
 * drizzle-kit generates the SQL in drizzle/ from this file. One object is
 * written by hand in its migration (0013) and not declared here: the view
 * `stepkey.key_rows`, every key's row in the ledger's columns (the ledger's
 * own, and each step as the ledger held it before 0013), for the read models.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  doublePrecision,
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
        sql`${t.kind} = 'run' and (${t.status} = 'failed' or ${t.status} = 'cancelled' or (${t.status} = 'completed' and not ${t.outcomeOk}))`,
      ),
    // The same runs of one workflow, newest first: a workflow's failed runs without reading every failed run.
    index('ledger_runs_unsuccessful_workflow_idx')
      .on(t.name, t.createdAt, t.scope, t.key)
      .where(
        sql`${t.kind} = 'run' and (${t.status} = 'failed' or ${t.status} = 'cancelled' or (${t.status} = 'completed' and not ${t.outcomeOk}))`,
      ),
  ],
);

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
  /** Set when other workers declared the pool dead and unlocked its jobs. */
  unlockedAt: at('unlocked_at'),
});

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
    /** The run failed (resumable): no slot, not dispatched, until a resume puts it back in line (flow/sql/requeue.ts). */
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
