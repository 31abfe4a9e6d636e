/**
 * Recording finished steps of a run (stepkey.steps), and the attempts of its outside calls.
 *
 * Guarantee: the rows are written only while the caller holds the run's
 * lease (its token is the run row's current one and the run is in progress);
 * otherwise stepkey.lease_held raises SKL01 and the whole step transaction —
 * business writes included — rolls back. The run row is share-locked until
 * COMMIT, so a takeover or a cancel lands either before the fence (and the
 * step rolls back) or after the commit (and the step counts). A plain INSERT, never ON CONFLICT DO
 * NOTHING: if another holder committed the same step first, the unique
 * violation (23505) rolls this transaction back too, and the step replays the
 * other holder's outcome. So a process whose lease was taken over can never
 * commit a step's business write a second time.
 *
 * Two cheaper fences for two cases, with the same guarantee:
 *   - `complete`: the run's completion itself is the fence. The statement
 *     that records the last steps also stores the run's outcome, with the
 *     fenced UPDATE of the run row (lease token current, in progress) of
 *     lifecycle/complete.ts's completion; that UPDATE row-locks the run
 *     until COMMIT and the rows are written only if it wrote — one statement
 *     and one row lock instead of two.
 *   - `ownStart`: the transaction inserted the run's row itself (its start,
 *     folded into its first commit). Nobody else can see, take over or
 *     cancel a row not yet committed, so the rows need no lock on it.
 *
 * Attempts (stepkey.step_attempts) ride the same statement and the same
 * fence: a start is a plain INSERT (an attempt number another holder took
 * first is a unique violation, as for steps); an end or a resolution applies
 * only to an attempt started under this very lease token and not ended yet —
 * an attempt started by a holder whose lease is gone keeps no end, so it
 * stays unknown.
 *
 * The parts that write do not read the fence: it raises when the lease is
 * gone, which fails the whole statement (nothing of it is written). On Citus
 * a fence read by the writing parts becomes an intermediate result sent to
 * every worker, and each step a two-phase commit across all of them. The
 * inserts select from the run's row (scope and key from it, one primary-key
 * probe): Citus then sends each to the scope's node as it is, where an
 * INSERT … SELECT from a function alone is copied through the coordinator
 * (a two-phase commit too).
 *
 * Sent with every step, the statement is built as one text (db/statement-text.ts)
 * rather than from nested fragments: a third of the time it took to build.
 */
import type postgres from 'postgres';
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { SqlText, StatementText } from '../../db/statement-text.js';
import type { Lease, OutcomeToStore } from '../../ledger/types.js';
import type { AttemptWrite } from '../effects/attempts.js';
import { completeRun } from '../../lifecycle/complete.js';
import { holdsRead } from '../../lifecycle/holds.js';

export interface StepRow {
  /** The derived key: childKey(rootKey, name). */
  key: string;
  /** The step's instance name: `name` or `name[id]`. */
  name: string;
  ok: boolean;
  body: string;
  attempts: number;
  /** Its place in the run's record (the order the run recorded its steps). */
  seq?: number | null;
}

/** How the rows are fenced (see above): a share lock on the run row (default), the run's completion, or nothing in the run's own start. */
export type StepRowsFence =
  | { kind: 'share' }
  | { kind: 'complete'; outcome: OutcomeToStore; retentionMs: number }
  | { kind: 'ownStart' };

export function insertStepRowsStatement(
  q: Queryable,
  clock: Clock,
  run: Lease,
  rows: readonly StepRow[],
  attempts: readonly AttemptWrite[] = [],
  fencedBy: StepRowsFence = { kind: 'share' },
): postgres.PendingQuery<postgres.Row[]> {
  const b = new StatementText();
  b.sql`with `;
  fence(b, clock, run, fencedBy);
  const starts = attempts.filter((a) => a.write === 'start' || a.write === 'once');
  const ends = attempts.filter((a) => a.write === 'end');
  const resolutions = attempts.filter((a) => a.write === 'resolve');
  if (starts.length) {
    // An attempt's start is the moment its record is written (the wall clock, not the transaction's start).
    const startedAt = new SqlText(`(clock_timestamp() + ${b.param(clock.offsetMs)}::float8 * interval '1 millisecond')`);
    b.sql`, started as (
      insert into stepkey.step_attempts (scope, run_key, step, attempt, kind, lease_token, started_at, ended_at, outcome)
      select r.scope, r.key, s.step, s.attempt, s.kind, ${run.token}::uuid, ${startedAt},
             case when s.write = 'once' then ${startedAt} end, case when s.write = 'once' then 'ok' end
        from stepkey.ledger r, json_to_recordset(${JSON.stringify(starts)}::json) as s(write text, step text, attempt int, kind text)
       where r.scope = ${run.scope} and r.key = ${run.key}
      returning 1)`;
  }
  if (ends.length) {
    b.sql`, ended as (
      update stepkey.step_attempts a
         -- In UTC: timestamp + interval is immutable, timestamptz + interval is not (Citus refuses a
         -- non-immutable call on a column in an UPDATE's SET).
         set ended_at = ((a.started_at at time zone 'UTC') + e."durationMs" * interval '1 millisecond') at time zone 'UTC', outcome = e.outcome, error = e.error
        from json_to_recordset(${JSON.stringify(ends)}::json)
             as e(step text, attempt int, outcome text, error text, "durationMs" float8)
       where a.scope = ${run.scope} and a.run_key = ${run.key} and a.step = e.step
         and a.attempt = e.attempt and a.lease_token = ${run.token}::uuid and a.ended_at is null
      returning 1)`;
  }
  if (resolutions.length) {
    b.sql`, resolved as (
      update stepkey.step_attempts a
         set resolution = r.resolution, resolved_output = r.output, resolved_at = ${b.now(clock)}
        from json_to_recordset(${JSON.stringify(resolutions)}::json) as r(step text, attempt int, resolution text, output text)
       where a.scope = ${run.scope} and a.run_key = ${run.key} and a.step = r.step
         and a.attempt = r.attempt and a.resolution is null
      returning 1)`;
  }
  if (rows.length) {
    const now = b.now(clock);
    b.sql`, steps as (
      insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
      select r.scope, s.key, r.key, s.name, s.body, s.ok, s.attempts, s.seq, ${now}
        from stepkey.ledger r, json_to_recordset(${JSON.stringify(rows)}::json) as s(key text, name text, body text, ok boolean, attempts int, seq int)
       where r.scope = ${run.scope} and r.key = ${run.key}
      returning 1)`;
  }
  b.sql`
    select held${new SqlText(fencedBy.kind === 'complete' ? `, ${holdsRead} as woken` : '')} from fence`;
  return b.query(q);
}

function fence(b: StatementText, clock: Clock, run: Lease, fencedBy: StepRowsFence): void {
  switch (fencedBy.kind) {
    case 'ownStart':
      b.sql`fence as (select true as held)`;
      return;
    case 'complete':
      completeRun(b, clock, run, fencedBy.outcome, { retentionMs: fencedBy.retentionMs });
      b.sql`, fence as (
      select stepkey.lease_held(count(*)) as held from completed
    )`;
      return;
    case 'share':
      b.sql`fence as (
      select stepkey.lease_held(count(*)) as held
        from (select 1 from stepkey.ledger
               where scope = ${run.scope} and key = ${run.key}
                 and lease_token = ${run.token}::uuid and status = 'in_progress'
                 for share) as run
    )`;
      return;
  }
}
