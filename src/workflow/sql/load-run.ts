/**
 * Loading a run to resume it: its row (workflow, version, input), every
 * finished step and every recorded attempt of its outside calls, in one
 * query, however many steps it has.
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import type { KeyRef, RunColumns } from '../../ledger/types.js';
import type { AttemptRecord } from '../effects/attempts.js';
import { waitFromColumns, type RunWait, type WaitColumns } from '../../lifecycle/wait.js';
import type { FreshRun } from '../../lifecycle/dispatch.js';

export interface FinishedStep {
  ok: boolean;
  body: string;
  attempts: number;
  /** Its place in the run's record (null on rows from before it was kept). */
  seq?: number | null;
}

export interface LoadedRun extends RunColumns {
  /** The wait it was parked in (or is being woken from), if any. */
  wait: RunWait | undefined;
  /** stepkey's clock (ms since the epoch) when it was loaded: a wait due by then is over. */
  loadedAtMs: number;
  /** What its later executions' spans continue: the stored trace context and the run's attempt. */
  trace: RunTrace;
  /** Finished steps by their instance name (`name` or `name[id]`). */
  steps: Map<string, FinishedStep>;
  /** The effect record: recorded attempts by step instance name, in attempt order. */
  stepAttempts: Map<string, AttemptRecord[]>;
}

/** A loaded run's trace: the context stored at its start (null when none was) and its attempt. */
export interface RunTrace {
  context: string | null;
  attempt: number;
}

interface Row extends WaitColumns {
  workflow: string;
  parent_run: string | null;
  version: number;
  input: string;
  attempts: number;
  last_error: string | null;
  root_key: string | null;
  trace_context: string | null;
  step_name: string | null;
  step_outcome: string | null;
  step_ok: boolean | null;
  step_attempts: number | null;
  step_seq: number | null;
  attempt_rows: AttemptRecord[] | null;
  now_ms: number;
  deadline_at_ms: number | null;
}

export async function loadRun(q: Queryable, clock: Clock, ref: KeyRef): Promise<LoadedRun | undefined> {
  const rows = await q<Row[]>`
    with recorded as (
      select json_agg(json_build_object(
               'step', a.step, 'attempt', a.attempt, 'kind', a.kind, 'leaseToken', a.lease_token,
               'startedAtMs', (extract(epoch from a.started_at) * 1000)::float8,
               'endedAtMs', (extract(epoch from a.ended_at) * 1000)::float8,
               'outcome', a.outcome, 'error', a.error, 'resolution', a.resolution, 'resolvedOutput', a.resolved_output)
             order by a.step, a.attempt) as attempt_rows
        from stepkey.step_attempts a
       where a.scope = ${ref.scope} and a.run_key = ${ref.key}
    )
    select r.name as workflow, r.version, r.input, r.attempts, r.last_error, r.root_key, r.parent_run, r.trace_context,
           (extract(epoch from r.deadline_at) * 1000)::float8 as deadline_at_ms,
           r.wait_kind, r.wait_step, r.wait_for, (extract(epoch from r.wait_until) * 1000)::float8 as wait_until_ms,
           c.name as step_name, c.outcome as step_outcome, c.outcome_ok as step_ok, c.attempts as step_attempts,
           c.seq as step_seq, recorded.attempt_rows,
           (extract(epoch from clock_timestamp() + ${clock.offsetMs}::float8 * interval '1 millisecond') * 1000)::float8 as now_ms
      from stepkey.ledger r
      cross join recorded
      left join stepkey.steps c on c.scope = r.scope and c.run_key = r.key
     where r.scope = ${ref.scope} and r.key = ${ref.key} and r.kind = 'run'`;
  const first = rows[0];
  if (!first) return undefined;
  const steps = new Map<string, FinishedStep>();
  for (const row of rows) {
    if (row.step_name === null) continue;
    steps.set(row.step_name, { ok: row.step_ok ?? false, body: row.step_outcome ?? '', attempts: row.step_attempts ?? 1, seq: row.step_seq });
  }
  const stepAttempts = new Map<string, AttemptRecord[]>();
  for (const record of first.attempt_rows ?? []) {
    const list = stepAttempts.get(record.step) ?? [];
    list.push(record);
    stepAttempts.set(record.step, list);
  }
  return {
    workflow: first.workflow,
    version: first.version,
    input: first.input,
    attempts: first.attempts,
    lastError: first.last_error,
    rootKey: first.root_key,
    wait: waitFromColumns(first),
    loadedAtMs: first.now_ms,
    deadlineAtMs: first.deadline_at_ms,
    parentRun: first.parent_run,
    trace: { context: first.trace_context, attempt: first.attempts },
    steps,
    stepAttempts,
  };
}

/** A run a dispatch started with nothing recorded yet, as loadRun would have read it (no load needed). */
export function loadedFresh(fresh: FreshRun): LoadedRun {
  const { traceContext, startedAtMs, ...columns } = fresh;
  return {
    ...columns,
    wait: undefined,
    loadedAtMs: startedAtMs,
    trace: { context: traceContext, attempt: fresh.attempts },
    steps: new Map(),
    stepAttempts: new Map(),
  };
}
