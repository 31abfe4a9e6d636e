/**
 * The runs listing, for `stepkey runs` and the dashboard: the ledger's run
 * rows with their status (run-status.ts), filtered by workflow, version,
 * status, scope and creation time.
 *
 *   newest     newest first, paged by a cursor — (created_at, scope, key) of
 *              the last row, compared as a row, so a page is one index range
 *   attention  open statuses first (stuck, failed, running), then the rest,
 *              newest first within each: one branch per group, each served by
 *              its own index, in one statement
 *
 * Which index serves which filter (the table in docs/performance.md; a test with 200 000
 * runs checks the plans):
 *   none, time, completed        ledger_runs_created_idx (created_at, scope, key)
 *   workflow (and version)       ledger_runs_workflow_idx (name, version, created_at, …),
 *                                one range per version (the one asked for, or each
 *                                one a loose index scan finds), read in the index's
 *                                own order
 *   failed, errored, cancelled   ledger_runs_unsuccessful_idx (only runs that
 *                                ended without success have an entry); with a
 *                                workflow, ledger_runs_unsuccessful_workflow_idx
 *                                (name, created_at, …) over the same runs
 *   running, stuck               ledger_run_leases_idx (in-progress runs only)
 *   waiting, needs_review        ledger_due_idx (parked runs only)
 *   scope                        the primary key (scope, key) for a small scope;
 *                                ledger_runs_created_idx, filtered, for a large one
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { assertStorableText } from '../../keys/validate.js';
import { runStatusSpec, runStatusTable, statusCaseSql, statusCondition, type RunStatusName } from '../run-status.js';
import { SqlText } from './sql-text.js';
import { queuePlaceId, queuePlaces, type QueuePlace } from './queue-places.js';

export interface ListedRun {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  status: RunStatusName;
  /** Whether the next call with its key (or a resume) goes on with it. */
  resumable: boolean;
  attempts: number;
  /** A waiting run's wait: timer, event, child…; its topic or child key; when it is due (ms, null: when woken). */
  waitKind: string | null;
  /** The waiting step (for a run that needs review, the call to resolve). */
  waitStep: string | null;
  waitFor: string | null;
  wakeAt: number | null;
  /** Milliseconds since the epoch. */
  createdAt: number;
  updatedAt: number;
  completedAt: number | null;
  ageMs: number;
  /** Lease left (negative: expired that long ago); null when not in progress. */
  leaseLeftMs: number | null;
  /** The last error (failed), or the stored error or cancellation reason, as stored JSON text. */
  error: string | null;
  /** A queued run's queue, partition and place in its line (queue-places.ts); null when it is on no queue. */
  queue: QueuePlace | null;
}

export interface ListRunsFilter {
  workflow?: string;
  version?: number;
  status?: RunStatusName;
  scope?: string;
  /** Created at or after (ISO time or ms). */
  from?: string | number;
  /** Created before. */
  to?: string | number;
  /** From a previous page's `next` (newest order only). */
  cursor?: string;
  limit: number;
  order?: 'newest' | 'attention';
}

export interface RunsPage {
  runs: ListedRun[];
  /** The cursor of the next page; null on the last one. */
  next: string | null;
}

const MAX_LIMIT = 500;

/** The statuses of runs that may hold a queue entry: waiting for a slot or another wait, or holding a slot. */
const onQueueStatuses = new Set<RunStatusName>(['waiting', 'needs_review', 'running', 'stuck']);

export async function listRuns(q: Queryable, clock: Clock, filter: ListRunsFilter): Promise<RunsPage> {
  if (!Number.isInteger(filter.limit) || filter.limit < 1 || filter.limit > MAX_LIMIT) {
    throw new StepkeyError('invalid_input', `A page holds 1 to ${MAX_LIMIT} runs, not ${filter.limit}.`);
  }
  if (filter.workflow !== undefined) assertStorableText(filter.workflow, "The runs filter's 'workflow'");
  if (filter.scope !== undefined) assertStorableText(filter.scope, "The runs filter's 'scope'");
  const statement = runsStatement(clock, filter);
  const rows = await q.unsafe<(Omit<ListedRun, 'queue'> & { cursorAt: string; sort_at: unknown; rank?: number })[]>(statement.text, statement.values as never[]);
  const more = filter.order !== 'attention' && rows.length > filter.limit;
  const runs = rows.slice(0, filter.limit);
  const last = runs[runs.length - 1];
  // Only the page's open runs can be on a queue (a run leaves it when it ends): one more statement, for them alone.
  const places = await queuePlaces(q, runs.filter((run) => onQueueStatuses.has(run.status)));
  return {
    runs: runs.map(({ cursorAt: _cursor, sort_at: _at, rank: _rank, ...run }) => ({ ...run, queue: places.get(queuePlaceId(run)) ?? null })),
    next: more && last ? encodeCursor(last.cursorAt, last.scope, last.key) : null,
  };
}

/** The statement listRuns sends for a filter (for tests that EXPLAIN it). */
export function runsStatement(clock: Clock, filter: ListRunsFilter): { text: string; values: unknown[] } {
  const text = new SqlText(clock);
  const statement = filter.order === 'attention' ? attentionQuery(text, filter) : newestQuery(text, filter);
  return { text: statement, values: text.values };
}

/** The columns of a listed run, over the ledger row `l`. */
function columns(text: SqlText): string {
  const now = text.now();
  return `l.scope, l.key, l.name as workflow, l.version, ${statusCaseSql(now)} as status,
          l.status in ('in_progress', 'failed') or (l.status = 'waiting' and l.wait_kind is distinct from 'review') as resumable,
          l.attempts, l.wait_kind as "waitKind", l.wait_step as "waitStep", l.wait_for as "waitFor",
          ${epochMs('l.wake_at')} as "wakeAt",
          ${epochMs('l.created_at')} as "createdAt", ${epochMs('l.updated_at')} as "updatedAt",
          ${epochMs('l.completed_at')} as "completedAt",
          (extract(epoch from (${now} - l.created_at)) * 1000)::float8 as "ageMs",
          (extract(epoch from (l.locked_until - ${now})) * 1000)::float8 as "leaseLeftMs",
          case when l.status = 'failed' then l.last_error
               when l.status = 'cancelled' or not l.outcome_ok then l.outcome end as error,
          to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "cursorAt",
          l.created_at as sort_at`;
}

/** Conditions on `l` from the filter (all but the status and the cursor). */
function filters(text: SqlText, filter: ListRunsFilter): string {
  const parts = ["l.kind = 'run'"];
  if (filter.workflow !== undefined) {
    // With a status whose own index is the narrower way in (failed, running, waiting, …), the workflow is
    // checked on that index's few rows: `|| ''` keeps the planner from reading the whole workflow's range
    // of ledger_runs_workflow_idx instead, which its estimates sometimes prefer.
    // An unsuccessful status has an index by workflow of its own (ledger_runs_unsuccessful_workflow_idx).
    const name = statusIndexFirst(filter) && !unsuccessfulStatus(filter) ? "(l.name || '')" : 'l.name';
    parts.push(`${name} = ${text.param(filter.workflow)}::text`);
  }
  if (filter.version !== undefined) parts.push(`l.version = ${text.param(filter.version)}::int`);
  if (filter.scope !== undefined) parts.push(`l.scope = ${text.param(filter.scope)}::text`);
  if (filter.from !== undefined) parts.push(`l.created_at >= ${text.param(isoTime(filter.from, 'from'))}::timestamptz`);
  if (filter.to !== undefined) parts.push(`l.created_at < ${text.param(isoTime(filter.to, 'to'))}::timestamptz`);
  return parts.join(' and ');
}

/** Whether the status filter has an index of its own that serves the page better than the workflow's. */
function statusIndexFirst(filter: ListRunsFilter): boolean {
  return filter.status !== undefined && runStatusSpec(filter.status).index !== 'ledger_runs_created_idx';
}

/** Whether the status filter is one of the unsuccessful ends (failed, errored, cancelled). */
function unsuccessfulStatus(filter: ListRunsFilter): boolean {
  return filter.status !== undefined && runStatusSpec(filter.status).index === 'ledger_runs_unsuccessful_idx';
}

const order = 'order by sort_at desc, scope desc, key desc';

function newestQuery(text: SqlText, filter: ListRunsFilter): string {
  const viaWorkflow = filter.workflow !== undefined && !statusIndexFirst(filter);
  const { version, ...unversioned } = filter;
  const where = [filters(text, viaWorkflow ? unversioned : filter)];
  if (filter.status !== undefined) where.push(statusCondition(filter.status, text.now()));
  if (filter.cursor !== undefined) {
    const [at, scope, key] = decodeCursor(filter.cursor);
    where.push(`(l.created_at, l.scope, l.key) < (${text.param(at)}::timestamptz, ${text.param(scope)}::text, ${text.param(key)}::text)`);
  }
  const limit = text.param(filter.limit + 1);
  if (!viaWorkflow) {
    return `select ${columns(text)} from stepkey.ledger l where ${where.join(' and ')} ${order} limit ${limit}`;
  }
  // A workflow, unless a status index is the narrower way in: one range of
  // ledger_runs_workflow_idx per version (the one asked for, or each one a loose index scan
  // finds), read newest first. Left to itself the planner may walk ledger_runs_created_idx
  // instead and filter by workflow — cheap by its estimates, which take the workflow's runs as
  // spread evenly over time; thousands of pages for an old version. So the version is a range
  // (>= and <=: compared with =, the lateral's version counts as a constant and drops out of the
  // sort), and the rows are asked for in (version, created_at, scope, key) order, which the
  // workflow index gives as it is and the created index only by sorting the whole workflow.
  const versions = version !== undefined ? `with versions(v) as (select ${text.param(version)}::int)` : loosely(text.param(filter.workflow));
  return `
    ${versions}
    select newest.* from versions
     cross join lateral (
       select ${columns(text)} from stepkey.ledger l
        where ${where.join(' and ')} and l.version >= versions.v and l.version <= versions.v
        order by l.version desc, l.created_at desc, l.scope desc, l.key desc limit ${limit}
     ) newest
     where versions.v is not null
     ${order} limit ${limit}`;
}

/** A workflow's versions, found by a loose index scan of ledger_runs_workflow_idx (`name`: its parameter). */
function loosely(name: string): string {
  return `with recursive versions(v) as (
      (select l.version from stepkey.ledger l where l.kind = 'run' and l.name = ${name}::text order by l.version limit 1)
      union all
      select (select l.version from stepkey.ledger l
               where l.kind = 'run' and l.name = ${name}::text and l.version > versions.v order by l.version limit 1)
        from versions where versions.v is not null
    )`;
}

function attentionQuery(text: SqlText, filter: ListRunsFilter): string {
  const base = filters(text, filter);
  const now = text.now();
  const limit = text.param(filter.limit);
  const wanted = filter.status === undefined ? runStatusTable : runStatusTable.filter((status) => status.name === filter.status);
  const open = wanted.filter((status) => status.open);
  const closed = wanted.filter((status) => !status.open);
  const branches = open.map((status) => ({ rank: runStatusTable.indexOf(status), when: statusCondition(status.name, now) }));
  if (closed.length > 0) {
    branches.push({ rank: runStatusTable.length, when: `(${closed.map((status) => statusCondition(status.name, now)).join(' or ')})` });
  }
  const union = branches
    .map((branch) => `(select ${columns(text)}, ${branch.rank} as rank from stepkey.ledger l where ${base} and ${branch.when} ${order} limit ${limit})`)
    .join(' union all ');
  return `select * from (${union}) runs order by rank, sort_at desc, scope, key limit ${limit}`;
}

/** The workflows that have runs, with their versions, for the filter controls: one loose index scan. */
export async function runWorkflows(q: Queryable): Promise<{ workflow: string; versions: number[] }[]> {
  return q.unsafe<{ workflow: string; versions: number[] }[]>(`
    with recursive pairs(name, version) as (
      (select l.name, l.version from stepkey.ledger l where l.kind = 'run' order by l.name, l.version limit 1)
      union all
      select next.name, next.version from pairs
       cross join lateral (
         select l.name, l.version from stepkey.ledger l
          where l.kind = 'run' and (l.name, l.version) > (pairs.name, pairs.version)
          order by l.name, l.version limit 1
       ) next
    )
    select name as workflow, array_agg(version order by version) as versions from pairs group by name order by name`);
}

function epochMs(column: string): string {
  return `(extract(epoch from ${column}) * 1000)::float8`;
}

function isoTime(value: string | number, what: string): string {
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) throw new StepkeyError('invalid_input', `'${what}' must be a time (ISO 8601 or ms), not '${value}'.`);
  return date.toISOString();
}

export function encodeCursor(at: string, scope: string, key: string): string {
  return Buffer.from(JSON.stringify([at, scope, key])).toString('base64url');
}

function decodeCursor(cursor: string): [string, string, string] {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (
      Array.isArray(parsed) && parsed.length === 3 &&
      parsed.every((part) => typeof part === 'string' && !part.includes('\u0000')) &&
      !Number.isNaN(Date.parse(String(parsed[0])))
    ) {
      return parsed as [string, string, string];
    }
  } catch {
    // Reported below.
  }
  throw new StepkeyError('invalid_input', 'This page cursor is not one stepkey made; start again from the first page.');
}
