/**
 * Loading a run to resume it: its row (workflow, version, input) and every
 * finished step, in one query, however many steps it has.
 */
import type { Queryable } from '../../db/connect.js';
import type { KeyRef } from '../../ledger/types.js';

export interface FinishedStep {
  ok: boolean;
  body: string;
  attempts: number;
}

export interface LoadedRun {
  workflow: string;
  version: number;
  input: string;
  attempts: number;
  lastError: string | null;
  /** Finished steps by their instance name (`name` or `name[id]`). */
  steps: Map<string, FinishedStep>;
}

interface Row {
  workflow: string;
  version: number;
  input: string;
  attempts: number;
  last_error: string | null;
  step_name: string | null;
  step_outcome: string | null;
  step_ok: boolean | null;
  step_attempts: number | null;
}

export async function loadRun(q: Queryable, ref: KeyRef): Promise<LoadedRun | undefined> {
  const rows = await q<Row[]>`
    select r.name as workflow, r.version, r.input, r.attempts, r.last_error,
           c.name as step_name, c.outcome as step_outcome, c.outcome_ok as step_ok, c.attempts as step_attempts
      from stepkey.ledger r
      left join stepkey.ledger c on c.scope = r.scope and c.parent_key = r.key and c.status = 'completed'
     where r.scope = ${ref.scope} and r.key = ${ref.key} and r.kind = 'run'`;
  const first = rows[0];
  if (!first) return undefined;
  const steps = new Map<string, FinishedStep>();
  for (const row of rows) {
    if (row.step_name === null) continue;
    steps.set(row.step_name, { ok: row.step_ok ?? false, body: row.step_outcome ?? '', attempts: row.step_attempts ?? 1 });
  }
  return {
    workflow: first.workflow,
    version: first.version,
    input: first.input,
    attempts: first.attempts,
    lastError: first.last_error,
    steps,
  };
}

/** One finished step, read after a unique violation showed another holder committed it. */
export async function loadStep(q: Queryable, scope: string, key: string): Promise<FinishedStep | undefined> {
  const rows = await q<{ outcome: string; outcome_ok: boolean; attempts: number }[]>`
    select outcome, outcome_ok, attempts from stepkey.ledger
     where scope = ${scope} and key = ${key} and status = 'completed'`;
  const row = rows[0];
  return row ? { ok: row.outcome_ok, body: row.outcome, attempts: row.attempts } : undefined;
}
