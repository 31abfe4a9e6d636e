/**
 * The effect record, in memory: every attempt of a step that reaches outside
 * (a `call`, an `enqueue`), as loaded with the run and as this execution
 * writes it.
 *
 *   started    its row is written, fenced by the run's lease, before the call
 *   ended      ok, failed (the callee answered with an error) or unknown (cut
 *              by a timeout, an abort or a lost connection: it may have
 *              reached the callee) — recorded only under the lease that
 *              started it
 *   no end     its process died or lost its lease mid-call: unknown too
 *
 * An unknown outcome stays unknown until it is resolved: the step's
 * reconcile found what it did (or found nothing), or an operator gave the
 * step's output or said to call again.
 */
import type { StoredError } from '../../ledger/outcome.js';

export type AttemptKind = 'call' | 'enqueue';
export type AttemptOutcome = 'ok' | 'failed' | 'unknown';
export type AttemptResolution = 'reconciled' | 'absent' | 'resolved' | 'retried';

/** One recorded attempt of one step. */
export interface AttemptRecord {
  step: string;
  attempt: number;
  kind: AttemptKind;
  /** The lease it started under. */
  leaseToken: string;
  startedAtMs: number;
  /** null: no end was recorded. */
  endedAtMs: number | null;
  outcome: AttemptOutcome | null;
  /** The stored error (JSON text) of a failed or cut attempt. */
  error: string | null;
  resolution: AttemptResolution | null;
  /** What a reconcile found or an operator gave (JSON text). */
  resolvedOutput: string | null;
}

/** A write to the effect record, sent with the next commit of the run (fenced by its lease). */
export type AttemptWrite =
  | { write: 'start'; step: string; attempt: number; kind: AttemptKind }
  /** An attempt started and ended in one (an enqueue: its job commits with its record). */
  | { write: 'once'; step: string; attempt: number; kind: AttemptKind }
  | { write: 'end'; step: string; attempt: number; outcome: AttemptOutcome; error: string | null; durationMs: number }
  | { write: 'resolve'; step: string; attempt: number; resolution: 'reconciled' | 'absent'; output: string | null };

/** What a call learns of the attempts before it (`CallContext.previous`, reconcile's `previous`). */
export interface PreviousAttempt {
  attempt: number;
  /** failed: the callee answered with an error; unknown: started and never ended, or cut — it may have reached the callee. */
  outcome: 'failed' | 'unknown';
  startedAt: Date;
  /** The error it failed or was cut with (none when its process died). */
  error?: StoredError;
  /** How an unknown outcome was settled, if it was: found absent by reconcile, or called again on an operator's word. */
  resolution?: AttemptResolution;
}

/** Whether the attempt may have reached the callee without the ledger knowing how it ended. */
export function isUnknown(record: Pick<AttemptRecord, 'outcome'>): boolean {
  return record.outcome === null || record.outcome === 'unknown';
}

/** Unknown outcomes nobody has settled yet: they stand between the step and its next call. */
export function unresolvedUnknowns(records: readonly AttemptRecord[]): AttemptRecord[] {
  return records.filter((record) => isUnknown(record) && record.resolution === null);
}

export function previousAttempts(records: readonly AttemptRecord[]): PreviousAttempt[] {
  return records
    .filter((record) => record.outcome !== 'ok')
    .map((record) => {
      const previous: PreviousAttempt = {
        attempt: record.attempt,
        outcome: record.outcome === 'failed' ? 'failed' : 'unknown',
        startedAt: new Date(record.startedAtMs),
      };
      if (record.error !== null) previous.error = JSON.parse(record.error) as StoredError;
      if (record.resolution !== null) previous.resolution = record.resolution;
      return previous;
    });
}

/** The next attempt's number: one more than any recorded, whichever lease recorded it. */
export function nextAttemptNumber(records: readonly AttemptRecord[]): number {
  return records.reduce((max, record) => Math.max(max, record.attempt), 0) + 1;
}
