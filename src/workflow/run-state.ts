/**
 * The state of one execution of one run in this process: its lease, the
 * steps it found finished, the step records waiting for the next commit, and
 * the switch that stops it at the next step boundary.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { Transaction } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { childKey } from '../keys/derive.js';
import type { Lease } from '../ledger/types.js';
import { RunStopped, type StopReason } from './errors.js';
import type { FinishedStep } from './sql/load-run.js';
import type { StepRow } from './sql/step-rows.js';

export interface RunDeps {
  sql: Sql;
  clock: Clock;
  retentionMs: number;
  leaseMs: number;
}

export class RunState {
  readonly deps: RunDeps;
  readonly lease: Lease;
  readonly rootKey: string;
  /** Finished steps by instance name: loaded on resume, added as steps commit. */
  readonly finished: Map<string, FinishedStep>;
  /** Records (ctx.now, ctx.uuid) that go out with the next commit. */
  pending: StepRow[] = [];
  /**
   * The open transaction that holds the run's uncommitted start (its claim),
   * when the start is folded into the first step: that step's commit is the
   * run's first. Undefined once the start has committed.
   */
  opening: Transaction | undefined;
  /** The transaction that carries the run's start, kept to know whether it has committed. */
  readonly #start: Transaction | undefined;
  /**
   * The last tx step's transaction, its writes done and its row written,
   * waiting to commit at the next step boundary — so that a run that ends
   * right after it commits its completion in the same transaction.
   */
  deferred: { transaction: Transaction; rows: StepRow[]; label: string } | undefined;
  readonly #used = new Set<string>();
  readonly #controller = new AbortController();
  #stopReason: StopReason | undefined;
  #halted: { error: unknown } | undefined;
  /** Steps of one run execute one at a time, in the order they were called. */
  #queue: Promise<unknown> = Promise.resolve();
  /** Set once the run's outcome is being recorded: no step may start after it. */
  ended = false;
  /** When the run's folded start was claimed (its lease was computed then). */
  readonly claimedAt = Date.now();

  constructor(
    deps: RunDeps,
    lease: Lease,
    rootKey: string,
    finished: Map<string, FinishedStep>,
    opening?: Transaction,
  ) {
    this.deps = deps;
    this.lease = lease;
    this.rootKey = rootKey;
    this.finished = finished;
    this.opening = opening;
    this.#start = opening;
  }

  /** Whether the run's row exists for others yet (its start has committed). */
  get startPending(): boolean {
    return this.#start !== undefined && !this.#start.committed;
  }

  /** Takes the deferred step transaction, if any: the caller now commits it. */
  takeDeferred(): RunState['deferred'] {
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

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get stopReason(): StopReason | undefined {
    return this.#stopReason;
  }

  /** Stops the run at its next step boundary (and aborts calls in flight). */
  stop(reason: StopReason): void {
    if (this.#stopReason) return;
    this.#stopReason = reason;
    this.#controller.abort(new RunStopped(reason));
  }

  /**
   * Ends this execution with `error`, for good: every later step boundary
   * throws it again, so that workflow code catching it cannot carry on (a
   * failed commit must not be followed by the run's completion).
   */
  halt(error: unknown): void {
    this.#halted ??= { error };
  }

  get halted(): { error: unknown } | undefined {
    return this.#halted;
  }

  throwIfStopped(): void {
    if (this.#stopReason) throw new RunStopped(this.#stopReason);
    if (this.#halted) throw this.#halted.error;
  }

  /** Runs `work` after every step called before it has finished. */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(work);
    this.#queue = result.catch(() => undefined);
    return result;
  }

  /** Marks an instance name used in this execution; a second use is an error with `duplicateMessage`. */
  use(instanceName: string, duplicateMessage: string): string {
    if (this.#used.has(instanceName)) {
      throw new StepkeyError('duplicate_step', duplicateMessage, { details: { step: instanceName } });
    }
    this.#used.add(instanceName);
    return childKey(this.rootKey, instanceName);
  }

  /** Takes the pending records for a commit; they are put back if the commit fails. */
  takePending(): StepRow[] {
    const rows = this.pending;
    this.pending = [];
    return rows;
  }
}
