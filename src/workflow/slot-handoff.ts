/**
 * A queue slot handed over at a run's end. A run that holds its queue's slot
 * gives it back in the statement that completes it (lifecycle/holds.ts); the
 * engine that registers the queue (src/flow) may send (on a queue of one
 * slot: FlowControl.handOffCount), in that same
 * transaction, a dispatch of the queue — a swap of that one slot for the next
 * run, or a dispatch under the queue's lock, taken only if a run waits and
 * no one holds it, and held only while the batch runs — so that the next
 * queued run starts with the commit that ended this one, not a transaction
 * later. The workflow layer knows only this plug (`RunDeps.slotHandOff`).
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import type { Lease } from '../ledger/types.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** What a completion sends to hand its slot over, and what it does with their answers after the commit. */
export interface HandOff {
  /** How many statements `statements` builds (known before they are built). */
  count: number;
  /** The statements to send last in the commit that completes the run, built on `q`. */
  statements(q: Queryable): Statement[];
  /** After that commit: what those statements answered, in order. */
  after(answers: readonly unknown[]): void;
}

export interface SlotHandOff {
  /** The hand-off of the run under `lease`, if it holds a slot (none otherwise). */
  withCompletion(lease: Lease): HandOff | undefined;
}
