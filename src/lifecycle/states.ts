/**
 * A run's states: one vocabulary, from the ledger to every caller.
 *
 *                 claim                 park (timer, event, child, slot, limit, review)
 *   (no row) ─────────────▶ running ───────────────────────▶ waiting
 *                           │  ▲  ▲  wake (due: its time, an event, a child's end,
 *                           │  │  └──────────── a slot, a resolution) ◀──┘
 *                           │  └─ take over (lease ran out) / resume (failed)
 *                           ├──▶ completed · errored           (stored outcome)
 *                           ├──▶ cancelled · deadline_exceeded  (stored outcome; also from waiting or failed)
 *                           └──▶ failed                         (retries ran out: resumable)
 *
 * A waiting run whose wait is a review shows as `needs_review`. The ledger
 * stores a running run as `in_progress` and an errored one as a completed row
 * whose outcome is not ok: `runStatusOf` is the one place that maps what it
 * stores to these names. (`stuck`, a running run whose lease ran out, is a
 * read model's status: see read/run-status.ts.)
 */
import { StepkeyError } from '../errors/stepkey-error.js';

/** What a run is, as every caller sees it. */
export type RunStatus =
  | 'running'
  | 'waiting'
  | 'needs_review'
  | 'completed'
  | 'errored'
  | 'failed'
  | 'cancelled'
  | 'deadline_exceeded';

/** Every status a run can have, in the order of its life. */
export const runStatuses: readonly RunStatus[] = [
  'running',
  'waiting',
  'needs_review',
  'completed',
  'errored',
  'failed',
  'cancelled',
  'deadline_exceeded',
];

/** A run's status as the ledger stores it. */
export type StoredRunStatus = 'in_progress' | 'waiting' | 'completed' | 'failed' | 'cancelled' | 'deadline_exceeded';

/** The stored statuses of a run that has ended for good: each has a stored outcome, replayed to every caller. */
export const endedStatuses = ['completed', 'cancelled', 'deadline_exceeded'] as const;

/** The stored statuses of a run that has not ended: a cancel or a deadline still applies. */
export const openStatuses = ['in_progress', 'waiting', 'failed'] as const;

/** What a run's row holds that decides its status. */
export interface StatusFields {
  status: string;
  outcomeOk: boolean | null;
  waitKind: string | null;
}

/** The run's status, and whether the next call with its key (or a resume) goes on with it. */
export function runStatusOf(row: StatusFields): { status: RunStatus; resumable: boolean } {
  switch (row.status) {
    case 'in_progress':
      return { status: 'running', resumable: true };
    case 'waiting':
      return row.waitKind === 'review' ? { status: 'needs_review', resumable: false } : { status: 'waiting', resumable: true };
    case 'failed':
      return { status: 'failed', resumable: true };
    case 'cancelled':
      return { status: 'cancelled', resumable: false };
    case 'deadline_exceeded':
      return { status: 'deadline_exceeded', resumable: false };
    case 'completed':
      return row.outcomeOk ? { status: 'completed', resumable: false } : { status: 'errored', resumable: false };
    default:
      throw new StepkeyError('database_error', `A run's row has status '${row.status}', which this release does not know.`);
  }
}

/** Whether a stored status is final. */
export function isEnded(status: string): boolean {
  return (endedStatuses as readonly string[]).includes(status);
}
