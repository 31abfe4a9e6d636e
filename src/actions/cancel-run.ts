/**
 * Cancel: a run in progress, waiting or failed is finished as cancelled —
 * and so are the child runs it waits on — its reason stored as its outcome
 * (workflow/waits/cancel.ts); a retry with its key replays "cancelled", the
 * process executing it stops at its next step boundary, and a parent waiting
 * on it is woken. The change and its audit row commit together.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import { toJsonText, type StoredError } from '../ledger/outcome.js';
import type { KeyRef } from '../ledger/types.js';
import type { RunStatusName } from '../read/run-status.js';
import { cancelRuns } from '../workflow/waits/cancel.js';
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
  /** Every run cancelled: this one and the child runs it waited on. */
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
  const stored = toJsonText({ name: 'RunCancelled', message: reason } satisfies StoredError, 'reason');
  try {
    const previous = await requireRun(sql, clock, ref);
    let applied = false;
    const cancelled = await cancelRuns(sql, clock, ref, stored, options.retentionMs, async (tx, done) => {
      applied = done.keys.includes(ref.key);
      const children = done.keys.filter((key) => key !== ref.key);
      await insertAuditStatement(tx, clock, options.by, {
        scope: ref.scope, action: 'cancel', key: ref.key, applied, detail: { reason, before: previous, ...(children.length ? { children } : {}) },
      });
    });
    return { applied, previous, keys: cancelled.keys, parentRun: cancelled.parentRun };
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
