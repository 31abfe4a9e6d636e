/** Plain reads of ledger rows, for inspection and tests. */
import type { Queryable } from '../../db/connect.js';
import type { KeyRef, LedgerKind, LedgerStatus } from '../types.js';

export interface LedgerRow {
  scope: string;
  key: string;
  kind: LedgerKind;
  name: string | null;
  parentKey: string | null;
  fingerprint: string;
  status: LedgerStatus;
  outcome: string | null;
  outcomeOk: boolean | null;
  outcomeCode: number | null;
  lastError: string | null;
  /** A run's workflow version (its workflow is `name`). */
  version: number | null;
  /** The stored root of the keys derived under this row (null on rows from before roots were stored). */
  rootKey: string | null;
  /** A run's wait (see workflow/waits): kind, step, what for, when due (ms). */
  waitKind: string | null;
  waitStep: string | null;
  waitFor: string | null;
  wakeAt: number | null;
  /** A child run's parent run. */
  parentRun: string | null;
  /** A rerun: the run it was started from, and the step it executed again from. */
  rerunOf: string | null;
  rerunFrom: string | null;
  /** A step row's place in its run's record. */
  seq: number | null;
  leaseToken: string | null;
  attempts: number;
  /** Milliseconds since the epoch, or null. */
  lockedUntil: number | null;
  expiresAt: number | null;
  createdAt: number;
  updatedAt: number;
  completedAt: number | null;
}

const epochMs = (column: string) => `(extract(epoch from ${column}) * 1000)::float8`;

export const ledgerColumns = `
  scope, key, kind, name, parent_key as "parentKey", fingerprint, status, outcome,
  outcome_ok as "outcomeOk", outcome_code as "outcomeCode", last_error as "lastError", version,
  root_key as "rootKey", wait_kind as "waitKind", wait_step as "waitStep", wait_for as "waitFor",
  ${epochMs('wake_at')} as "wakeAt", parent_run as "parentRun", rerun_of as "rerunOf", rerun_from as "rerunFrom", seq,
  lease_token::text as "leaseToken", attempts,
  ${epochMs('locked_until')} as "lockedUntil", ${epochMs('expires_at')} as "expiresAt",
  ${epochMs('created_at')} as "createdAt", ${epochMs('updated_at')} as "updatedAt",
  ${epochMs('completed_at')} as "completedAt"`;

export async function readRow(q: Queryable, ref: KeyRef): Promise<LedgerRow | undefined> {
  const rows = await q.unsafe<LedgerRow[]>(
    `select ${ledgerColumns} from stepkey.key_rows where scope = $1 and key = $2 limit 1`,
    [ref.scope, ref.key],
  );
  return rows[0];
}

/** The children of a root row (a run's steps), oldest first. */
export async function readChildren(q: Queryable, ref: KeyRef): Promise<LedgerRow[]> {
  return q.unsafe<LedgerRow[]>(
    `select ${ledgerColumns} from stepkey.key_rows where scope = $1 and parent_key = $2 order by created_at, seq, key`,
    [ref.scope, ref.key],
  );
}
