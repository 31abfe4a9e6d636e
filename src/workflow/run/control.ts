/**
 * Execution control: whether an execution of a run may go on. It stops at its
 * next step boundary — and its calls in flight are aborted through its signal
 * — when its lease is lost, its process shuts down, another holder commits
 * first, the database stays away, the run parks, or its deadline passes; a
 * failed commit halts it for good. Steps execute one at a time, in the order
 * they were called, and each marks the progress that keeps its lease renewed.
 */
import type { RunWait } from '../../lifecycle/wait.js';
import { RunStopped, type StopReason } from '../errors.js';

export class ExecutionControl {
  /** Made when something first listens (most runs never read their signal). */
  #controller: AbortController | undefined;
  #stopReason: StopReason | undefined;
  #halted: { error: unknown } | undefined;
  /** The wait this execution parked the run in. */
  #parked: RunWait | undefined;
  /** Steps of one run execute one at a time, in the order they were called. */
  #queue: Promise<unknown> = Promise.resolve();
  /** Set once the run's outcome is being recorded: no step may start after it. */
  ended = false;
  /** When the run's folded start was claimed (its lease was computed then). */
  readonly claimedAt = Date.now();
  /** Until when (epoch ms) this execution counts as making progress; the heartbeat renews its lease only until then. */
  #aliveUntil: number;
  /** Until when (epoch ms, this process's clock, on the safe side) its lease is known to be held: the last renewal sent plus a lease. */
  heldUntil: number;
  /** The run's deadline (ms since the epoch, stepkey's clock), and how to read that clock here. */
  readonly #deadline: { atMs: number; nowMs: () => number } | undefined;

  constructor(leaseMs: number, deadline?: { atMs: number; nowMs: () => number }) {
    this.#aliveUntil = Date.now() + leaseMs;
    this.heldUntil = this.#aliveUntil;
    this.#deadline = deadline;
  }

  /**
   * Marks progress: the execution promises to reach its next mark within
   * `ms` — a lease for work with no bound of its own (waiting for a
   * connection, code between steps, a commit), an attempt's timeout plus a
   * lease while an attempt runs.
   */
  progress(ms: number): void {
    this.#aliveUntil = Date.now() + ms;
  }

  /** Whether the execution missed its mark: it is not renewed, and another process takes the run over. */
  stalled(now = Date.now()): boolean {
    return now > this.#aliveUntil;
  }

  /** The run's deadline (ms since the epoch, stepkey's clock), if it has one. */
  get deadlineAtMs(): number | undefined {
    return this.#deadline?.atMs;
  }

  /** Whether the run's deadline has passed, by this process's reading of stepkey's clock. */
  pastDeadline(): boolean {
    return this.#deadline !== undefined && this.#deadline.nowMs() >= this.#deadline.atMs;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#stopReason) this.#controller.abort(new RunStopped(this.#stopReason));
    }
    return this.#controller.signal;
  }

  get stopReason(): StopReason | undefined {
    return this.#stopReason;
  }

  /** Stops the run at its next step boundary (and aborts calls in flight). */
  stop(reason: StopReason): void {
    if (this.#stopReason) return;
    this.#stopReason = reason;
    this.#controller?.abort(new RunStopped(reason));
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

  /**
   * The run has parked (its park committed): this execution ends at once —
   * workflow code unwinds through RunStopped('parked') — and the run
   * continues, in whatever process, once it is due.
   */
  park(wait: RunWait): RunStopped {
    this.#parked = wait;
    this.stop('parked');
    return new RunStopped('parked');
  }

  get parked(): RunWait | undefined {
    return this.#parked;
  }

  /** At a step boundary: throws if the execution may not go on (its deadline passed stops it here). */
  throwIfStopped(): void {
    if (!this.#stopReason && this.pastDeadline()) this.stop('deadline');
    if (this.#stopReason) throw new RunStopped(this.#stopReason);
    if (this.#halted) throw this.#halted.error;
  }

  /** Runs `work` after every step called before it has finished. */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(work);
    this.#queue = result.catch(() => undefined);
    return result;
  }
}

