/**
 * The wait a queued run records while it waits for a slot: kind `slot`, for
 * the queue, at the step `queue:<name>`. Written here for the engine, and
 * passed from here into the SQL that parks a resumed run (sql/requeue.ts).
 */

/** What a run waiting for a slot of queue Q records as its wait step: this prefix and Q. */
export const SLOT_WAIT_STEP_PREFIX = 'queue:';

/** The wait of a queued run, as the ledger records it. */
export function slotWait(queue: string) {
  return { kind: 'slot' as const, step: `${SLOT_WAIT_STEP_PREFIX}${queue}`, for: queue, untilMs: null };
}
