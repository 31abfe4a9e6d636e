/**
 * A queue slot handed over at a run's end. A run that holds its queue's slot
 * gives it back in the statement that completes it (lifecycle/holds.ts); the
 * engine that registers the queue (src/flow) may send, in that same
 * transaction, a dispatch of the queue — taken only if no one holds the
 * queue's lock, and held only while the batch runs — so that the next queued run starts
 * with the commit that ended this one, not a transaction later. The workflow
 * layer knows only this plug (`RunDeps.slotHandOff`).
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import type { Lease } from '../ledger/types.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

export interface SlotHandOff {
  /** Statements to send last in the commit that completes the run under `lease` (none if it holds no slot). */
  withCompletion(lease: Lease, q: Queryable): Statement[];
  /** After that commit: what those statements answered, in order. */
  afterCompletion(lease: Lease, answers: readonly unknown[]): void;
}
