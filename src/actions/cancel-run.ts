/**
 * Cancel: a run in progress, waiting or failed is finished as cancelled —
 * and so is every descendant run, found by its parent link — its reason
 * stored as its outcome (lifecycle/tree.ts); a retry with its key replays
 * "cancelled", a process executing one stops at its next step boundary, and
 * a parent waiting on the run is woken. The change and the audit rows — one
 * per run cancelled, each naming the cancellation's root — commit together.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import type { StoredError } from '../ledger/outcome.js';
import type { KeyRef } from '../ledger/types.js';
import type { RunStatusName } from '../read/run-status.js';
import { endTreeIn } from '../lifecycle/tree.js';
import { inTransactionRetryingDeadlock } from '../db/retrying-transaction.js';
import { assertActionBy, insertAuditStatement, type ActionBy } from './sql/audit.js';
import { runBefore } from './sql/run-before.js';

export interface CancelOptions {
  reason?: string;
  retentionMs: number;
  by: ActionBy;
}

export interface ActionResult {
  /** Whether the run changed (false: it had already ended, or was not in a state the action applies to). */
  applied: boolean;
  /** Its status before. */
  previous: RunStatusName;
}

export interface CancelResult extends ActionResult {
  /** Every run cancelled: this one and its descendants. */
  keys: string[];
  /** The parent run woken by this cancel, if one waited on it. */
  parentRun: string | null;
}

const MAX_REASON = 1_000;

export async function cancelRunAction(sql: Sql, clock: Clock, ref: KeyRef, options: CancelOptions): Promise<CancelResult> {
  assertRef(ref);
  assertActionBy(options.by);
  const reason = options.reason ?? 'cancelled';
  if (typeof reason !== 'string' || reason.trim() === '' || reason.length > MAX_REASON) {
    throw new StepkeyError('invalid_input', `A cancel reason is 1 to ${MAX_REASON} characters of text.`);
  }
  const outcome: StoredError = { name: 'RunCancelled', message: reason };
  const descendant: StoredError = { name: 'RunCancelled', message: `cancelled with run '${ref.key}': ${reason}`, data: { root: ref.key } };
  try {
    const previous = await requireRun(sql, clock, ref);
    const cancelled = await inTransactionRetryingDeadlock(sql, async (tx) => {
      const done = await endTreeIn(tx, clock, ref, { status: 'cancelled', outcome, descendant }, options.retentionMs);
      const children = done.keys.filter((key) => key !== ref.key);
      await insertAuditStatement(tx, clock, options.by, {
        scope: ref.scope, action: 'cancel', key: ref.key, applied: done.applied, detail: { reason, before: previous, ...(children.length ? { children } : {}) },
      });
      for (const child of children) {
        await insertAuditStatement(tx, clock, options.by, { scope: ref.scope, action: 'cancel', key: child, applied: true, detail: { reason, root: ref.key } });
      }
      return done;
    });
    return { applied: cancelled.applied, previous, keys: cancelled.keys, parentRun: cancelled.parentRun };
  } catch (error) {
    throw translateDatabaseError(error, 'cancelling a run');
  }
}

export function assertRef(ref: KeyRef): void {
  if (!ref || typeof ref !== 'object') throw new StepkeyError('invalid_key', 'A run needs { scope, key }.');
  assertValidScope(ref.scope);
  assertValidKey(ref.key);
}

/** The run's status before the action; a clear error for a key that is not a run. */
export async function requireRun(q: Parameters<typeof runBefore>[0], clock: Clock, ref: KeyRef): Promise<RunStatusName> {
  const before = await runBefore(q, clock, ref);
  if (!before) throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
  if (before.kind !== 'run' || before.status === null) {
    throw new StepkeyError('run_not_found', `Key '${ref.key}' in scope '${ref.scope}' is a ${before.kind}, not a run.`);
  }
  return before.status;
}
