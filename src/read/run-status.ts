/**
 * Every status a run shows to an operator — in `stepkey runs`, the
 * dashboard and the metrics — in one table. A status is one line: its name,
 * its label and tone (the dashboard's colour), whether it is open (counted by
 * the metrics' gauge, shown first by `stepkey runs`), the SQL condition on a
 * ledger row `l` that selects it (`:now` is the engine's clock), and the
 * index that serves a filter on it (the index table in docs/performance.md; a test checks
 * the query plans use it).
 *
 * The conditions are tried in order: a row has the first status whose
 * condition holds. Adding a status is adding a line.
 */

/** How the dashboard colours a status: one palette entry per tone. */
export type StatusTone = 'danger' | 'warning' | 'active' | 'ok' | 'muted';

export interface RunStatusSpec {
  readonly name: string;
  readonly label: string;
  readonly tone: StatusTone;
  /** Not final, or final and needing a person: counted by the gauge, listed first. */
  readonly open: boolean;
  /** Whether the run goes on with the next call with its key (or a resume). */
  readonly resumable: boolean;
  readonly description: string;
  /** SQL over the ledger row `l`; `:now` stands for stepkey's now(). */
  readonly when: string;
  /** The index a filter on this status is served by. */
  readonly index: string;
}

export const runStatusTable = [
  { name: 'stuck', label: 'stuck', tone: 'danger', open: true, resumable: true, description: 'in progress, but its lease ran out: its process died and no sweeper has taken it over', when: "l.status = 'in_progress' and l.locked_until <= :now", index: 'ledger_run_leases_idx' },
  { name: 'needs_review', label: 'needs review', tone: 'danger', open: true, resumable: false, description: 'stopped at an at-most-once call whose outcome is unknown: an operator resolves it (stepkey resolve)', when: "l.status = 'waiting' and l.wait_kind = 'review'", index: 'ledger_due_idx' },
  { name: 'failed', label: 'failed', tone: 'danger', open: true, resumable: true, description: 'its retries ran out: resumable by the next call with its key, or stepkey resume', when: "l.status = 'failed'", index: 'ledger_runs_unsuccessful_idx' },
  { name: 'errored', label: 'errored', tone: 'danger', open: false, resumable: false, description: 'a stored error ended it: final, replayed to every retry', when: "l.status = 'completed' and not l.outcome_ok", index: 'ledger_runs_unsuccessful_idx' },
  { name: 'running', label: 'running', tone: 'active', open: true, resumable: true, description: 'executing in some process, which holds its lease', when: "l.status = 'in_progress' and l.locked_until > :now", index: 'ledger_run_leases_idx' },
  { name: 'waiting', label: 'waiting', tone: 'warning', open: true, resumable: true, description: 'parked: waits for a timer, an event, a child run, a queue\'s slot or a step limit, holding no lease; any sweeper (a queue: its dispatch) continues it when due', when: "l.status = 'waiting' and l.wait_kind is distinct from 'review'", index: 'ledger_due_idx' },
  { name: 'completed', label: 'completed', tone: 'ok', open: false, resumable: false, description: 'its output is stored and replayed', when: "l.status = 'completed' and l.outcome_ok", index: 'ledger_runs_created_idx' },
  { name: 'cancelled', label: 'cancelled', tone: 'muted', open: false, resumable: false, description: 'cancelled by an operator or the app (or with an ancestor run); the reason is stored', when: "l.status = 'cancelled'", index: 'ledger_runs_unsuccessful_idx' },
  { name: 'deadline_exceeded', label: 'deadline exceeded', tone: 'muted', open: false, resumable: false, description: 'did not finish before its deadline: final, like a cancellation; its descendants were cancelled with it', when: "l.status = 'deadline_exceeded'", index: 'ledger_runs_unsuccessful_idx' },
] as const satisfies readonly RunStatusSpec[];

export type RunStatusName = (typeof runStatusTable)[number]['name'];

export const runStatusNames: readonly RunStatusName[] = runStatusTable.map((status) => status.name);

export function isRunStatusName(value: string): value is RunStatusName {
  return (runStatusNames as readonly string[]).includes(value);
}

export function runStatusSpec(name: RunStatusName): RunStatusSpec {
  return runStatusTable.find((status) => status.name === name)!;
}

/** The SQL condition of a status, with `:now` replaced by `now` (an SQL expression). */
export function statusCondition(name: RunStatusName, now: string): string {
  return `(${runStatusSpec(name).when.replaceAll(':now', now)})`;
}

/** `case when … then 'stuck' … end`: the status of the ledger row `l`. */
export function statusCaseSql(now: string): string {
  const arms = runStatusTable.map((status) => `when ${statusCondition(status.name, now)} then '${status.name}'`);
  return `case ${arms.join(' ')} else 'unknown' end`;
}
