/**
 * Deadlines. A run may have one (`defineWorkflow({ deadline })`,
 * `engine.start(…, { deadline })`): a duration from its start or a date,
 * stored with its claim as `deadline_at` (the database's clock). A run still
 * unfinished then ends `deadline_exceeded` — final, its outcome stored like
 * a cancellation's — wherever it is, and its descendants are cancelled with
 * it (tree.ts):
 *
 *   executing    at its next step boundary, or at once through its signal (a
 *                running call is aborted): its process ends it, fenced by its
 *                lease (engine/local-runs.ts)
 *   parked       on anything — a timer, an event, a child, a queue slot, a
 *                limit, a review — its row is due at the deadline (park.ts
 *                makes `wake_at` the earlier of the wait's end and the
 *                deadline), and the sweep ends it for a run of any version,
 *                also one no live process registers (sweep.ts)
 *   failed, or   the sweep ends it too
 *   its process
 *   died
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { StoredError } from '../ledger/outcome.js';

/** A deadline as a caller gives it: a duration from the run's start (ms), or a date. */
export type Deadline = number | Date;

/** A deadline, checked: relative to the claim (`inMs`) or absolute (`atMs`, ms since the epoch). */
export type ResolvedDeadline = { inMs: number } | { atMs: number };

/** Checks a deadline before anything is stored; undefined for none. */
export function resolveDeadline(deadline: Deadline | undefined, where: string): ResolvedDeadline | undefined {
  if (deadline === undefined) return undefined;
  if (deadline instanceof Date) {
    const atMs = deadline.getTime();
    if (!Number.isFinite(atMs)) throw new StepkeyError('invalid_input', `${where}: the deadline is not a valid date.`);
    return { atMs };
  }
  if (typeof deadline !== 'number' || !Number.isFinite(deadline) || deadline <= 0) {
    throw new StepkeyError(
      'invalid_input',
      `${where}: a deadline is a positive, finite number of milliseconds or a Date, got ${typeof deadline === 'number' ? deadline : typeof deadline}.`,
    );
  }
  return { inMs: deadline };
}

/** The stored outcome of a run that passed its deadline. */
export function deadlineExceededOutcome(): StoredError {
  return { name: 'DeadlineExceeded', message: 'The run did not finish before its deadline.' };
}
