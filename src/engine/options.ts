/**
 * An engine's options, their defaults and checks, and the types a caller
 * gets back from starting a run.
 */
import type { z } from 'zod';
import type { ConnectOptions, Database } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { DEFAULT_LEASE_MS } from '../db/lease.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidKey, assertValidScope } from '../keys/validate.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import type { KeyRef } from '../ledger/types.js';
import type { Logger } from '../log/logger.js';
import type { Queue } from '../flow/define-queue.js';
import type { Limit } from '../flow/define-limit.js';
import type { Deadline } from '../lifecycle/deadline.js';
import type { Workflow } from '../workflow/define.js';
import type { StepHandleExtension } from '../workflow/executor.js';

export interface EngineOptions {
  /** A database from connect(), or a URL (the engine then owns its pool). */
  database: Database | string;
  /** Every workflow version this engine may start or resume. */
  workflows: readonly Workflow[];
  clock?: Clock;
  /** Lease of a running run; a killed run resumes about this long after (default 8 s, env STEPKEY_LEASE_MS). */
  leaseMs?: number;
  /** How often leases are extended (default a third of the lease). */
  heartbeatMs?: number;
  /** How long a finished run's key is kept (default 24 h). */
  retentionMs?: number;
  /** How often the sweeper looks for expired leases (default 1 s, env STEPKEY_SWEEP_INTERVAL_MS). */
  sweepIntervalMs?: number;
  /** Runs this process executes at once that it woke, took over or dispatched from a queue (default 8; each holds a pooled connection while it writes). Woken runs also leave a fifth of the pool (at least 2 connections) to what callers send. */
  maxConcurrentRuns?: number;
  /** Queues this engine enqueues on and dispatches (see defineQueue). */
  queues?: readonly Queue<any>[];
  /** Limits on outside providers that steps take from (see defineLimit); a step that names one not registered is refused here. */
  limits?: readonly Limit<any>[];
  /** Step kinds added by other layers. */
  stepExtensions?: readonly StepHandleExtension[];
  /** Background failures (heartbeat, sweeper); default: printed to stderr. */
  onError?: (error: unknown, context: string) => void;
  /**
   * Where takeovers, resumes, retries and unknown outcomes are logged, as JSON
   * lines: a pino logger (or anything with its info/warn/error/debug), false
   * for none. Default: pino if it is installed (STEPKEY_LOG_LEVEL, default info).
   */
  logger?: Logger | false;
}

export interface RunOptions {
  /** Fingerprint to use instead of (workflow name + input): a tRPC procedure passes path + input. */
  fingerprint?: string;
  /** With `fingerprint`: its v1 form, for keys stored before fingerprints had versions. */
  legacyFingerprint?: () => string;
  /** Volatile input fields left out of the fingerprint, e.g. ['meta.traceId']. */
  exclude?: string[];
  /**
   * When the run ends as `deadline_exceeded` if it has not ended before: a
   * duration (ms) from its start, or a date. Default: the workflow's. Not
   * part of the fingerprint: a duplicate start keeps the first start's.
   */
  deadline?: Deadline;
}

export interface RunHandle<Result, W extends Workflow = Workflow> extends KeyRef {
  /** Its workflow: a handle is a typed ref for `engine.send`. */
  readonly workflow: W;
  /** What the run's step keys derive from; null when another call's start of it had not committed yet. */
  readonly rootKey: string | null;
  /** false when the key already had a run (this call joined or replayed it). */
  readonly started: boolean;
  /** The run's result, waiting for it wherever it executes. */
  result(): Promise<Result>;
}

export type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

/** A run's fingerprint and, computed when a stored row needs it, its v1 form. */
export interface Fingerprints {
  fingerprint: string;
  legacyFingerprint: () => string;
}

/** The engine's settings, with every default applied and checked. */
export interface EngineSettings {
  leaseMs: number;
  heartbeatMs: number;
  retentionMs: number;
  sweepIntervalMs: number;
  maxConcurrentRuns: number;
  /**
   * Runs woken or taken over by this process at once, at most: no more than
   * `maxConcurrentRuns`, and a share of the pool (a fifth, at least 2
   * connections) left to what the process's callers send — starts, sends,
   * reads — so that a process busy waking never starves them.
   */
  wakeRoom: number;
}

const envNumber = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};

/** A run's lease: `leaseMs`, STEPKEY_LEASE_MS or the default. */
const leaseMsOf = (options: EngineOptions): number => positive('leaseMs', options.leaseMs ?? envNumber('STEPKEY_LEASE_MS'), DEFAULT_LEASE_MS);

/**
 * The pool an engine opens from a URL: its sessions end a transaction left
 * idle for longer than the engine's lease (whole milliseconds, at most the
 * lease), so a frozen process holds no lock longer than a takeover takes.
 */
export function ownedPoolOptions(options: EngineOptions): ConnectOptions {
  return { idleInTransactionTimeoutMs: Math.max(1, Math.floor(leaseMsOf(options))) };
}

export function engineSettings(options: EngineOptions, poolMax: number): EngineSettings {
  const leaseMs = leaseMsOf(options);
  const maxConcurrentRuns = positive('maxConcurrentRuns', options.maxConcurrentRuns, 8);
  return {
    leaseMs,
    heartbeatMs: positive('heartbeatMs', options.heartbeatMs, Math.max(50, Math.floor(leaseMs / 3))),
    retentionMs: positive('retentionMs', options.retentionMs, DEFAULT_RETENTION_MS),
    sweepIntervalMs: positive('sweepIntervalMs', options.sweepIntervalMs ?? envNumber('STEPKEY_SWEEP_INTERVAL_MS'), 1_000),
    maxConcurrentRuns,
    wakeRoom: Math.min(maxConcurrentRuns, Math.max(1, poolMax - Math.max(2, Math.ceil(poolMax / 5)))),
  };
}

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new StepkeyError('invalid_options', `${name} must be a positive number, got ${value}.`);
  }
  return value;
}

export function assertValidRef(ref: KeyRef): void {
  if (!ref || typeof ref !== 'object') throw new StepkeyError('invalid_key', 'A run needs { scope, key }.');
  assertValidScope(ref.scope);
  assertValidKey(ref.key);
}

/** A run's identity in this process's maps. */
export const idOf = (ref: KeyRef) => `${ref.scope}\u0000${ref.key}`;
