/**
 * A step's effect record as callers see it (engine.get, inspect, tRPC
 * status): each attempt's start, end, duration, outcome and error, and —
 * for a call — how many times the callee may have seen the step's key.
 */
import type { StoredError } from '../../ledger/outcome.js';
import { isUnknown, type AttemptKind, type AttemptRecord, type AttemptResolution } from './attempts.js';

export interface AttemptInfo {
  attempt: number;
  kind: AttemptKind;
  startedAt: Date;
  /** null: no end was recorded (its process died or lost its lease mid-call, or it is in flight). */
  endedAt: Date | null;
  durationMs: number | null;
  /** ok; failed (the callee answered with an error); unknown (no end, or cut: it may have reached the callee). */
  outcome: 'ok' | 'failed' | 'unknown';
  error?: StoredError;
  /** How an unknown outcome was settled: reconciled (found), absent (reconcile found nothing), resolved or retried by an operator. */
  resolution?: AttemptResolution;
  /** What reconcile found or the operator gave (JSON text). */
  resolvedOutput?: string;
}

/** A step's outside effect, summed up. */
export interface EffectSummary {
  kind: AttemptKind;
  /** Attempts started: each may have reached the callee. */
  started: number;
  succeeded: number;
  failed: number;
  /** Attempts whose outcome is unknown (none settled them or they were settled since). */
  unknown: number;
  /** How many times the callee may have seen the step's key: every attempt that started. */
  mayHaveSeen: number;
}

export function attemptInfo(record: AttemptRecord): AttemptInfo {
  const info: AttemptInfo = {
    attempt: record.attempt,
    kind: record.kind,
    startedAt: new Date(record.startedAtMs),
    endedAt: record.endedAtMs === null ? null : new Date(record.endedAtMs),
    durationMs: record.endedAtMs === null ? null : Math.max(0, Math.round(record.endedAtMs - record.startedAtMs)),
    outcome: isUnknown(record) ? 'unknown' : (record.outcome as 'ok' | 'failed'),
  };
  if (record.error !== null) info.error = JSON.parse(record.error) as StoredError;
  if (record.resolution !== null) info.resolution = record.resolution;
  if (record.resolvedOutput !== null) info.resolvedOutput = record.resolvedOutput;
  return info;
}

export function effectSummary(records: readonly AttemptRecord[]): EffectSummary | undefined {
  const first = records[0];
  if (!first) return undefined;
  const count = (test: (record: AttemptRecord) => boolean) => records.filter(test).length;
  return {
    kind: first.kind,
    started: records.length,
    succeeded: count((record) => record.outcome === 'ok'),
    failed: count((record) => record.outcome === 'failed'),
    unknown: count(isUnknown),
    mayHaveSeen: records.length,
  };
}
