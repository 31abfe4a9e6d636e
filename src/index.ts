/**
 * stepkey: typed workflows with step-keyed durable execution on Postgres.
 *
 * The public API. Optional parts have their own entry points:
 *   stepkey/testing   fault points, crash helpers
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
