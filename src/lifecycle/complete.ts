/**
 * Complete: a run's outcome is stored — its output (completed) or a stored
 * error (errored, a completed row whose outcome is not ok) — and it keeps
 * nothing: no lease, no queue entry, no limit slot (holds.ts). It expires
 * `retentionMs` after.
 *
 * Guarantee: only by the holder of the run's lease (its token current, the
 * run in progress). The UPDATE row-locks the run until COMMIT, which fences
 * the steps recorded in the same statement (workflow/sql/step-rows.ts): a
 * takeover or a cancel lands before it (and nothing commits) or after it.
 * Times come from the statement's own clock; nothing in it is volatile.
 */
import type { Clock } from '../db/clock.js';
import type { StatementText } from '../db/statement-text.js';
import type { Lease, OutcomeToStore } from '../ledger/types.js';
import { giveBackHolds } from './holds.js';

/**
 * Appends `completed as (<the fenced UPDATE>)` — returning one row when it
 * wrote — and the give-back of its holds
 * (the final SELECT reads holds.ts's `holdsRead`).
 */
export function completeRun(
  b: StatementText,
  clock: Clock,
  lease: Lease,
  outcome: OutcomeToStore,
  options: { retentionMs: number },
): void {
  const now = b.now(clock);
  b.sql`completed as (
      update stepkey.ledger
         set status = 'completed',
             outcome = ${outcome.body},
             outcome_ok = ${outcome.ok},
             outcome_code = ${outcome.code ?? null}::int,
             lease_token = null,
             locked_until = null,
             completed_at = ${now},
             updated_at = ${now},
             expires_at = ${now} + ${options.retentionMs}::float8 * interval '1 millisecond'
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'
      returning scope, key
    )`;
  giveBackHolds(b, lease, 'end', 'completed');
}
