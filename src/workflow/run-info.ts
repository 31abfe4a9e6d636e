/** Reading a run back: its status, output or error, and each step. */
import type { Queryable } from '../db/connect.js';
import type { KeyRef } from '../ledger/types.js';
import type { StoredError } from '../ledger/outcome.js';
import { readChildren, readRow, type LedgerRow } from '../ledger/sql/read.js';

export type RunStatus = 'running' | 'completed' | 'failed' | 'cancelled';

export interface StepInfo {
  /** The step's instance name: `name`, `name[id]`, `$now[label]`, `$uuid[label]`. */
  name: string;
  /** Its derived key. */
  key: string;
  ok: boolean;
  attempts: number;
  /** The stored output (JSON text, '' for none) or error. */
  output?: string;
  error?: StoredError;
  completedAt: Date | null;
}

export interface RunInfo {
  scope: string;
  key: string;
  workflow: string;
  version: number | null;
  /**
   * running: in progress somewhere; completed: output stored; failed: an error
   * ended it (`resumable` says whether the next call with its key goes on);
   * cancelled.
   */
  status: RunStatus;
  resumable: boolean;
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

export function runStatusOf(row: Pick<LedgerRow, 'status' | 'outcomeOk'>): { status: RunStatus; resumable: boolean } {
  switch (row.status) {
    case 'in_progress':
      return { status: 'running', resumable: true };
    case 'failed':
      return { status: 'failed', resumable: true };
    case 'cancelled':
      return { status: 'cancelled', resumable: false };
    default:
      return row.outcomeOk ? { status: 'completed', resumable: false } : { status: 'failed', resumable: false };
  }
}

export async function readRunInfo(q: Queryable, ref: KeyRef): Promise<RunInfo | undefined> {
  const [row, children] = await Promise.all([readRow(q, ref), readChildren(q, ref)]);
  if (!row || row.kind !== 'run') return undefined;
  const { status, resumable } = runStatusOf(row);
  const info: RunInfo = {
    scope: row.scope,
    key: row.key,
    workflow: row.name ?? '',
    version: row.version,
    status,
    resumable,
    attempts: row.attempts,
    leaseExpiresAt: date(row.lockedUntil),
    createdAt: new Date(row.createdAt),
    updatedAt: new Date(row.updatedAt),
    completedAt: date(row.completedAt),
    steps: children.map((child) => ({
      name: child.name ?? '',
      key: child.key,
      ok: child.outcomeOk ?? false,
      attempts: child.attempts,
      ...(child.outcomeOk ? { output: child.outcome ?? '' } : { error: JSON.parse(child.outcome ?? '{}') }),
      completedAt: date(child.completedAt),
    })),
  };
  if (row.outcomeOk && row.status === 'completed') info.output = row.outcome ?? '';
  else if (row.outcome) info.error = JSON.parse(row.outcome);
  else if (row.lastError) info.error = JSON.parse(row.lastError);
  return info;
}
