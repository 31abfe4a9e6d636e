/**
 * The commit buffer: what an execution has written and not committed yet,
 * committed together at the next step boundary (workflow/commit.ts). Four
 * kinds of work wait here:
 *
 *   opening          the run's start — its claim — folded into its first write
 *   deferred         the last tx step's transaction, its writes and step row
 *                    done, left open until the next step boundary: when the
 *                    run ends right after it, its completion rides along
 *   pending          records with no writes of their own (ctx.now, ctx.uuid,
 *                    a woken timer's end)
 *   pendingAttempts  effect-record writes (an attempt's end or resolution)
 *
 * and two things the next commit writes with them: the run's trace context
 * (a run started outside any span), and the limit slot a recorded step gives
 * back.
 */
import type { Transaction } from '../../db/transaction.js';
import type { AttemptWrite } from '../effects/attempts.js';
import type { StepRow } from '../sql/step-rows.js';

export class CommitBuffer {
  /**
   * The open transaction that holds the run's uncommitted start (its claim),
   * when the start is folded into the first step: that step's commit is the
   * run's first. Undefined once the start has committed.
   */
  opening: Transaction | undefined;
  /** The transaction that carries the run's start, kept to know whether it has committed. */
  readonly #start: Transaction | undefined;
  /** The last tx step's transaction, its writes done and its row written, waiting to commit. */
  deferred: { transaction: Transaction; rows: StepRow[]; label: string } | undefined;
  /** Records with no writes of their own that go out with the next commit. */
  pending: StepRow[] = [];
  /** Attempt writes (ends, resolutions) that go out with the next commit. */
  pendingAttempts: AttemptWrite[] = [];
  /** This execution's trace context, to be stored with the run by its next commit; undefined once stored, or when there is none. */
  traceToStore: string | undefined;
  /** The step holding a limit slot, given back in the commit that records it (src/flow/limit-release.ts). */
  limitHold: { step: string } | undefined;

  constructor(opening: Transaction | undefined) {
    this.opening = opening;
    this.#start = opening;
  }

  /** Whether the run's row exists for others yet (its start has committed). */
  get startPending(): boolean {
    return this.#start !== undefined && !this.#start.committed;
  }

  /** Takes the deferred step transaction, if any: the caller now commits it. */
  takeDeferred(): CommitBuffer['deferred'] {
    const deferred = this.deferred;
    this.deferred = undefined;
    return deferred;
  }

  /** Takes the open start transaction, if any: the caller now commits it. */
  takeOpening(): Transaction | undefined {
    const opening = this.opening;
    this.opening = undefined;
    return opening;
  }

  /** Takes the pending records for a commit; they are put back if the commit fails (see commitWaiting). */
  takePending(): StepRow[] {
    const rows = this.pending;
    this.pending = [];
    return rows;
  }

  /** Takes the attempt writes waiting for a commit. */
  takePendingAttempts(): AttemptWrite[] {
    const writes = this.pendingAttempts;
    this.pendingAttempts = [];
    return writes;
  }
}
