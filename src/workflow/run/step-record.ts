/**
 * The step record of one execution: the steps the run found finished (loaded
 * on resume, added as steps commit), each step's place in the run's record,
 * the instance names used (a name used twice is an error), the wait the run
 * was parked in when loaded, and the effect record of its outside calls.
 */
import { StepkeyError } from '../../errors/stepkey-error.js';
import { childKey } from '../../keys/derive.js';
import type { RunWait } from '../../lifecycle/wait.js';
import type { AttemptRecord, AttemptWrite } from '../effects/attempts.js';
import type { FinishedStep } from '../sql/load-run.js';

export class StepRecord {
  /** Finished steps by instance name: loaded on resume, added as steps commit. */
  readonly finished: Map<string, FinishedStep>;
  /** The effect record of this run's outside calls, by step instance name, kept up to date as this execution writes it. */
  readonly attempts: Map<string, AttemptRecord[]>;
  /** The wait this run was parked in when it was loaded (its waiting step reads it). */
  readonly wait: RunWait | undefined;
  /** stepkey's clock (ms) when the run was loaded; undefined for a run this execution started. */
  readonly loadedAtMs: number | undefined;
  /** Each step's place in the run's record, in the order the run reached them. */
  readonly #seqs = new Map<string, number>();
  #nextSeq: number;
  readonly #used = new Set<string>();

  constructor(
    readonly rootKey: string,
    loaded: { finished: Map<string, FinishedStep>; attempts?: Map<string, AttemptRecord[]>; wait?: RunWait; loadedAtMs?: number },
  ) {
    this.finished = loaded.finished;
    this.attempts = loaded.attempts ?? new Map();
    this.wait = loaded.wait;
    this.loadedAtMs = loaded.loadedAtMs;
    this.#nextSeq = 1 + Math.max(0, ...[...loaded.finished.values()].map((step) => step.seq ?? 0));
  }

  /** Gives the step (or recorded value) `instance` the next place in the run's record. */
  reach(instance: string): void {
    if (!this.#seqs.has(instance)) this.#seqs.set(instance, this.#nextSeq++);
  }

  /** The place in the run's record of a step this execution reached. */
  seqOf(instance: string): number | null {
    return this.#seqs.get(instance) ?? null;
  }

  /** Marks an instance name used in this execution; a second use is an error with `duplicateMessage`. Returns its derived key. */
  use(instanceName: string, duplicateMessage: string): string {
    if (this.#used.has(instanceName)) {
      throw new StepkeyError('duplicate_step', duplicateMessage, { details: { step: instanceName } });
    }
    this.#used.add(instanceName);
    return childKey(this.rootKey, instanceName);
  }

  /** The recorded wait of the step `instance`, if the run was parked there. */
  recordedWait(instance: string, kind: RunWait['kind']): RunWait | undefined {
    return this.wait && this.wait.step === instance && this.wait.kind === kind ? this.wait : undefined;
  }

  /** Applies attempt writes that have committed to the in-memory record (under `token`, this execution's lease). */
  applyAttempts(writes: readonly AttemptWrite[], nowMs: number, token: string): void {
    for (const write of writes) {
      const list = this.attempts.get(write.step) ?? [];
      this.attempts.set(write.step, list);
      const record = list.find((candidate) => candidate.attempt === write.attempt);
      switch (write.write) {
        case 'start':
        case 'once':
          if (record) break;
          list.push({
            step: write.step,
            attempt: write.attempt,
            kind: write.kind,
            leaseToken: token,
            startedAtMs: nowMs,
            endedAtMs: write.write === 'once' ? nowMs : null,
            outcome: write.write === 'once' ? 'ok' : null,
            error: null,
            resolution: null,
            resolvedOutput: null,
          });
          break;
        case 'end':
          if (record && record.leaseToken === token && record.endedAtMs === null) {
            record.endedAtMs = record.startedAtMs + write.durationMs;
            record.outcome = write.outcome;
            record.error = write.error;
          }
          break;
        case 'resolve':
          if (record && record.resolution === null) {
            record.resolution = write.resolution;
            record.resolvedOutput = write.output;
          }
          break;
      }
    }
  }
}
