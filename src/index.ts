/**
 * stepkey: typed workflows with step-keyed durable execution on Postgres.
 *
 * The public API. Optional parts have their own entry points:
 *   stepkey/trpc      the Idempotency-Key option for tRPC procedures, and the client link
 *   stepkey/testing   the crash kit, fault points, child processes you can SIGKILL
 */

// Keys and fingerprints
export { rootKey, childKey, stepInstanceName } from './keys/derive.js';
export { assertValidKey, assertValidScope, assertValidStepName, MAX_KEY_LENGTH } from './keys/validate.js';
export { canonicalJson, type CanonicalOptions } from './keys/canonical-json.js';
export { fingerprint, purposeFingerprint, type FingerprintOptions } from './keys/fingerprint.js';

// Errors
export { StepkeyError, isStepkeyError, httpStatusOf, type StepkeyErrorCode } from './errors/stepkey-error.js';
export { NonRetryableError, isNonRetryable, serializeError, toJsonText, type StoredError } from './ledger/outcome.js';

// Database
export { connect, type Database, type ConnectOptions, type DrizzleTx } from './db/connect.js';
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
export { defineWorkflow, step, type Workflow, type WorkflowInput, type WorkflowResult, type StepDeclaration, type StepOptions } from './workflow/define.js';
export type {
  CallContext,
  Enqueued,
  Jsonified,
  RunArguments,
  RunContext,
  StepHandle,
  StepHandles,
  StepUse,
  TxContext,
} from './workflow/handles.js';
export { createEngine, Engine, type EngineOptions, type RunAttempt, type RunHandle, type RunOptions } from './workflow/engine.js';
export type { RunInfo, RunStatus, StepInfo } from './workflow/run-info.js';
export type { RetryPolicy } from './workflow/retry.js';
export { dateField } from './workflow/schemas.js';

// Effects (the outbox) and the worker
export { defineEffect, retryHorizonMs, type Effect, type EffectContext, type EffectOptions } from './outbox/effect.js';
export { enqueueEffect, type EnqueueOptions, type EnqueueResult } from './outbox/enqueue.js';
export { deliverHttp, type DeliverOptions, type Delivered } from './outbox/deliver-http.js';
export { listJobs, retryJobs, type JobRow } from './outbox/sql/jobs.js';
export { runWorker, type Worker, type WorkerOptions } from './worker/run-worker.js';
export { purgeExpired, type PurgeResult } from './worker/purge.js';
export { inTransaction } from './db/transaction.js';
