/**
 * The dashboard's pages as views of the read models (src/read): each takes
 * the page's query parameters, checks them, and reads what the page shows —
 * one or two statements (the runs page a third, for the queue places of
 * its queued rows); `summary` (the workflows there are, the open runs)
 * is shared by every runs page whatever its filters. `viewKey` names a view for the shared cache
 * (live-views.ts): two tabs with the same page and filters share one read.
 */
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertStorableText } from '../keys/validate.js';
import type { LedgerRow } from '../ledger/sql/read.js';
import { readKeyTree, type Inspection } from '../read/key-tree.js';
import { isRunStatusName, runStatusNames } from '../read/run-status.js';
import { recentAudit } from '../read/sql/audit.js';
import { openRunCounts } from '../read/sql/figures.js';
import { jobStatuses, listJobs, outboxFigures, type JobStatus } from '../read/sql/jobs.js';
import { listRuns, runWorkflows, type ListRunsFilter } from '../read/sql/runs.js';
import { listWorkerPools } from '../read/sql/workers.js';
import { listQueues } from '../read/sql/queues.js';
import type { Workflow } from '../workflow/define.js';
import type { JobsView, KeyTreeView, LedgerRowView, QueuesView, RunsView, SummaryView, WorkersView } from './api-types.js';

export interface ViewDeps {
  q: Queryable;
  clock: Clock;
  workflows: readonly Workflow[];
  deadAfterMs: number;
  /** The database's now (as of the last probe), in ms. */
  now: () => number;
}

export interface View {
  key: string;
  read: () => Promise<unknown>;
}

const PAGE = 50;

export function viewFor(name: string, query: URLSearchParams, deps: ViewDeps): View | undefined {
  switch (name) {
    case 'runs':
      return runsView(query, deps);
    case 'run':
      return keyView(query, deps, true);
    case 'key':
      return keyView(query, deps, false);
    case 'jobs':
      return jobsView(query, deps);
    case 'summary':
      return { key: 'summary', read: () => readSummary(deps) };
    case 'workers':
      return { key: 'workers', read: () => readWorkers(deps) };
    case 'queues':
      return { key: 'queues', read: async (): Promise<QueuesView> => ({ partitions: await listQueues(deps.q), nowMs: deps.now() }) };
    default:
      return undefined;
  }
}

function runsView(query: URLSearchParams, deps: ViewDeps): View {
  const filter: ListRunsFilter = { limit: PAGE, order: 'newest' };
  const status = text(query, 'status');
  if (status !== undefined) {
    if (!isRunStatusName(status)) throw bad(`status must be one of ${runStatusNames.join(', ')}, not '${status}'.`);
    filter.status = status;
  }
  const workflow = text(query, 'workflow');
  if (workflow !== undefined) filter.workflow = workflow;
  const version = text(query, 'version');
  if (version !== undefined) {
    if (!/^\d{1,9}$/.test(version)) throw bad(`version must be a whole number, not '${version}'.`);
    filter.version = Number(version);
  }
  const scope = text(query, 'scope');
  if (scope !== undefined) filter.scope = scope;
  const from = text(query, 'from');
  if (from !== undefined) filter.from = from;
  const to = text(query, 'to');
  if (to !== undefined) filter.to = to;
  const cursor = text(query, 'cursor');
  if (cursor !== undefined) filter.cursor = cursor;
  const key = `runs?${JSON.stringify(filter)}`;
  return {
    key,
    read: async (): Promise<RunsView> => {
      const page = await listRuns(deps.q, deps.clock, filter);
      return { runs: page.runs, next: page.next, nowMs: deps.now() };
    },
  };
}

/** What every runs page shows whatever its filters: the workflows and versions there are, and the open runs. */
async function readSummary(deps: ViewDeps): Promise<SummaryView> {
  const [workflows, open] = await Promise.all([runWorkflows(deps.q), openRunCounts(deps.q, deps.clock)]);
  return { workflows, open, nowMs: deps.now() };
}

function keyView(query: URLSearchParams, deps: ViewDeps, run: boolean): View {
  const key = text(query, 'key');
  if (key === undefined) throw bad('Which key? Pass ?key=… (and &scope=…).');
  if (key.length > 1024) throw bad('A key is at most 1024 characters.');
  const scope = text(query, 'scope');
  if (run && scope === undefined) throw bad('A run is named by its scope and key: pass &scope=….');
  return {
    key: `key?${JSON.stringify([scope ?? null, key])}`,
    read: async (): Promise<KeyTreeView> => toTreeView(await readKeyTree(deps.q, { key, scope }, deps.workflows)),
  };
}

function jobsView(query: URLSearchParams, deps: ViewDeps): View {
  const status = text(query, 'status');
  if (status !== undefined && !(jobStatuses as readonly string[]).includes(status)) {
    throw bad(`status must be one of ${jobStatuses.join(', ')}, not '${status}'.`);
  }
  return {
    key: `jobs?${status ?? ''}`,
    read: async (): Promise<JobsView> => {
      const [jobs, figures] = await Promise.all([
        listJobs(deps.q, { ...(status ? { status: status as JobStatus } : {}), limit: 200 }),
        outboxFigures(deps.q),
      ]);
      return { jobs, counts: figures.counts, oldestPendingMs: figures.oldestPendingMs, nowMs: deps.now() };
    },
  };
}

async function readWorkers(deps: ViewDeps): Promise<WorkersView> {
  const [pools, recentActions] = await Promise.all([listWorkerPools(deps.q, deps.clock, deps.deadAfterMs), recentAudit(deps.q, 20)]);
  return { pools, deadAfterMs: deps.deadAfterMs, recentActions, nowMs: deps.now() };
}

function toTreeView(inspection: Inspection): KeyTreeView {
  return {
    nowMs: inspection.nowMs,
    matches: inspection.matches.map((match) => ({
      row: rowView(match.row),
      rootKey: match.rootKey,
      workflow: match.workflow ?? null,
      runStatus: match.runStatus,
      input: match.input,
      audit: match.audit,
      children: match.children.map(({ status: _status, ...child }) => child),
      reruns: match.reruns,
      queue: match.queue,
      items: match.items.map((item) => ({
        name: item.name,
        key: item.key,
        kind: item.kind,
        row: item.row ? rowView(item.row) : null,
        attempts: item.attempts.map((attempt) => ({
          attempt: attempt.attempt,
          kind: attempt.kind,
          startedAt: attempt.startedAtMs,
          endedAt: attempt.endedAtMs,
          outcome: attempt.outcome,
          error: attempt.error,
          resolution: attempt.resolution,
        })),
        downstream: item.downstream.map(rowView),
        jobs: item.jobs,
        inbox: item.inbox,
      })),
    })),
  };
}

/** A ledger row without its fingerprint and lease token: neither is the page's business. */
function rowView({ fingerprint: _fingerprint, leaseToken: _token, ...row }: LedgerRow): LedgerRowView {
  return row;
}

/** A query parameter, undefined when absent or blank; one Postgres cannot store is refused, naming it. */
function text(query: URLSearchParams, name: string): string | undefined {
  const value = query.get(name);
  if (value === null || value.trim() === '') return undefined;
  assertStorableText(value, `The '${name}' parameter`);
  return value;
}

function bad(message: string): StepkeyError {
  return new StepkeyError('invalid_input', message);
}
