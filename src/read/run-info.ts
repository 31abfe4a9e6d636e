/** Reading a run back: its status, output or error, and each step. */
import type { Queryable } from '../db/connect.js';
import { runStatusOf, type RunStatus } from '../lifecycle/states.js';

export type { RunStatus } from '../lifecycle/states.js';
import type { KeyRef } from '../ledger/types.js';
import type { StoredError } from '../ledger/outcome.js';
import { readChildren, readRow, type LedgerRow } from '../ledger/sql/read.js';
import { storedRootKey } from '../keys/derive.js';
import { waitView, type RunWaitView } from '../lifecycle/wait.js';
import { childKey } from '../keys/derive.js';
import type { AttemptRecord } from '../workflow/effects/attempts.js';
import { attemptInfo, effectSummary, type AttemptInfo, type EffectSummary } from '../workflow/effects/attempt-view.js';
import { readAttempts } from '../workflow/effects/sql/read-attempts.js';
import { queuePlace, type QueuePlace } from './sql/queue-places.js';


export interface StepInfo {
  /** The step's instance name: `name`, `name[id]`, `$now[label]`, `$uuid[label]`. */
  name: string;
  /** Its derived key. */
  key: string;
  /** Whether its record has committed (a call still in flight, or interrupted, has attempts but no record). */
  finished: boolean;
  ok: boolean;
  attempts: number;
  /** The stored output (JSON text, '' for none) or error. */
  output?: string;
  error?: StoredError;
  completedAt: Date | null;
  /** Every recorded attempt of a call or an enqueue, oldest first. */
  history: AttemptInfo[];
  /** A call's or an enqueue's attempts summed up: how many may have reached the callee. */
  effect?: EffectSummary;
}

export interface RunInfo {
  scope: string;
  key: string;
  workflow: string;
  version: number | null;
  /** What its step keys derive from: `childKey(rootKey, stepName)` is a step's key. */
  rootKey: string;
  /**
   * running: in progress somewhere; waiting: parked (see `wait`), holding no
   * process; completed: output stored; failed: an error ended it
   * (`resumable` says whether the next call with its key goes on); cancelled.
   */
  status: RunStatus;
  resumable: boolean;
  /** What a waiting run waits for, and until when. */
  wait?: RunWaitView;
  /**
   * A run on a queue (engine.enqueue): its queue, partition and priority,
   * whether it holds a slot, and — waiting for one — its position in its
   * partition's line (1: next), in dispatch's order. Absent once it has ended.
   */
  queue?: QueuePlace;
  /** A child run's parent (its key, in the same scope). */
  parentRun: string | null;
  /** A rerun: the run it reran (its key, same scope) and the step it executed again from. */
  rerunOf: { key: string; from: string } | null;
  /** Reruns of this run (their keys, same scope). */
  reruns: string[];
  /** The stored result (JSON text) of a completed run. */
  output?: string;
  error?: StoredError;
  /** Executions so far: 1, plus one per takeover or resume. */
  attempts: number;
  leaseExpiresAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
  completedAt: Date | null;
  steps: StepInfo[];
}

const date = (ms: number | null) => (ms === null ? null : new Date(ms));


export async function readRunInfo(q: Queryable, ref: KeyRef): Promise<RunInfo | undefined> {
  const [row, children, attempts, reruns, place] = await Promise.all([
    readRow(q, ref),
    readChildren(q, ref),
    readAttempts(q, ref),
    q<{ key: string }[]>`select key from stepkey.ledger where scope = ${ref.scope} and rerun_of = ${ref.key} order by created_at`,
    queuePlace(q, ref),
  ]);
  if (!row || row.kind !== 'run') return undefined;
  const byStep = new Map<string, AttemptRecord[]>();
  for (const record of attempts) byStep.set(record.step, [...(byStep.get(record.step) ?? []), record]);
  const effectOf = (name: string) => {
    const records = byStep.get(name) ?? [];
    const effect = effectSummary(records);
    return { history: records.map(attemptInfo), ...(effect ? { effect } : {}) };
  };
  const root = storedRootKey(row.scope, row.key, row.rootKey);
  const recorded = new Set(children.map((child) => child.name ?? ''));
  const { status, resumable } = runStatusOf(row);
  const info: RunInfo = {
    scope: row.scope,
    key: row.key,
    workflow: row.name ?? '',
    version: row.version,
    rootKey: root,
    parentRun: row.parentRun,
    rerunOf: row.rerunOf ? { key: row.rerunOf, from: row.rerunFrom ?? '' } : null,
    reruns: reruns.map((rerun) => rerun.key),
    status,
    resumable,
    attempts: row.attempts,
    leaseExpiresAt: date(row.lockedUntil),
    createdAt: new Date(row.createdAt),
    updatedAt: new Date(row.updatedAt),
    completedAt: date(row.completedAt),
    steps: [
      ...children.map((child) => ({
        name: child.name ?? '',
        key: child.key,
        finished: true,
        ok: child.outcomeOk ?? false,
        attempts: child.attempts,
        ...(child.outcomeOk ? { output: child.outcome ?? '' } : { error: JSON.parse(child.outcome ?? '{}') }),
        completedAt: date(child.completedAt),
        ...effectOf(child.name ?? ''),
      })),
      // Steps with attempts and no record yet: in flight, interrupted, or waiting for review.
      ...[...byStep.keys()]
        .filter((name) => !recorded.has(name))
        .map((name) => ({
          name,
          key: childKey(root, name),
          finished: false,
          ok: false,
          attempts: byStep.get(name)!.length,
          completedAt: null,
          ...effectOf(name),
        })),
    ],
  };
  if (row.status === 'waiting' && row.waitKind && row.waitStep) {
    info.wait = waitView({ kind: row.waitKind, step: row.waitStep, for: row.waitFor, untilMs: row.wakeAt });
  }
  if (place) info.queue = place;
  if (row.outcomeOk && row.status === 'completed') info.output = row.outcome ?? '';
  else if (row.outcome) info.error = JSON.parse(row.outcome);
  else if (row.lastError) info.error = JSON.parse(row.lastError);
  return info;
}
