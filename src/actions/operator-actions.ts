/**
 * The operator's actions — the same code path for the CLI, the engine API
 * and the dashboard. Each changes state only (sweepers and workers execute)
 * and writes an audit row in the same transaction:
 *
 *   cancel      finish a run in progress or failed as cancelled
 *   resume      make a failed or stuck run due for any sweeper
 *   retryJobs   make jobs that failed for good due again
 */
import type { Database } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import type { KeyRef } from '../ledger/types.js';
import { cancelRunAction, type ActionResult } from './cancel-run.js';
import { resumeRunAction, type ResumeResult } from './resume-run.js';
import { retryJobsAction, type RetryResult } from './retry-jobs.js';
import type { ActionBy } from './sql/audit.js';

export interface OperatorActions {
  cancel(ref: KeyRef, reason?: string): Promise<ActionResult>;
  resume(ref: KeyRef): Promise<ResumeResult>;
  retryJobs(ids: readonly string[]): Promise<RetryResult>;
}

export interface OperatorActionOptions {
  /** Who acts, recorded with each action (default: the app). */
  by?: ActionBy;
  clock?: Clock;
  /** How long a cancelled run's key is kept (default 24 h, like the engine's). */
  retentionMs?: number;
}

export function operatorActions(database: Pick<Database, 'sql'>, options: OperatorActionOptions = {}): OperatorActions {
  const by = options.by ?? { actor: 'app', source: 'api' };
  const clock = options.clock ?? systemClock;
  const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  return {
    cancel: (ref, reason) => cancelRunAction(database.sql, clock, ref, { ...(reason === undefined ? {} : { reason }), retentionMs, by }),
    resume: (ref) => resumeRunAction(database.sql, clock, ref, by),
    retryJobs: (ids) => retryJobsAction(database.sql, clock, ids, by),
  };
}

export type { ActionBy, ActionResult, RetryResult };
