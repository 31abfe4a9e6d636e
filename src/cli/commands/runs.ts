/**
 * `stepkey runs`: the runs an operator should look at first — stuck ones
 * (lease expired, nobody resuming), then failed, then running, then the rest.
 */
import { systemClock } from '../../db/clock.js';
import { positiveIntFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { ExitCode, UsageError } from '../errors.js';
import { errorMessage, formatDuration, plural } from '../format.js';
import { listRuns, runStatuses, type ListedRun, type ListedStatus } from '../sql/runs.js';
import { renderTable } from '../table.js';

export const runsCommand: Command = {
  name: 'runs',
  summary: 'list runs: stuck first, then failed, running, the rest',
  description: `
Lists workflow runs with their scope, key, workflow@version, status, attempts,
age, and the lease left (running), how long ago it expired (stuck: the process
died and no worker's sweeper took it over — is a worker running?) or the last
error (failed). Statuses: ${runStatuses.join(', ')}. A failed run marked
"resumable" goes on with the next call with its key, or \`stepkey resume\`.`,
  positionals: [],
  options: {
    status: { type: 'string', value: 'STATUS', description: runStatuses.join('|') },
    workflow: { type: 'string', value: 'NAME', description: 'only runs of this workflow' },
    scope: { type: 'string', value: 'S', description: 'only runs in this scope' },
    limit: { type: 'string', value: 'N', description: 'at most N runs (default 50)' },
  },
  async run(context, parsed) {
    const status = stringFlag(parsed.values, 'status');
    if (status !== undefined && !(runStatuses as readonly string[]).includes(status)) {
      throw new UsageError(`--status must be one of ${runStatuses.join(', ')}; got '${status}'.`, 'runs');
    }
    const filter = {
      limit: positiveIntFlag(parsed.values, 'limit', 'runs') ?? 50,
      ...(status === undefined ? {} : { status: status as ListedStatus }),
      ...optional('workflow', stringFlag(parsed.values, 'workflow')),
      ...optional('scope', stringFlag(parsed.values, 'scope')),
    };
    const runs = await context.withDatabase((database) => listRuns(database.sql, systemClock, filter));
    if (context.json) {
      context.printJson({
        runs: runs.map((run) => ({
          ...run,
          createdAt: new Date(run.createdAt).toISOString(),
          error: run.error === null ? null : parseStored(run.error),
        })),
      });
      return ExitCode.ok;
    }
    if (runs.length === 0) {
      context.line('No runs match.');
      return ExitCode.ok;
    }
    const columns = [
      { header: 'SCOPE', max: 32 },
      { header: 'KEY', max: 40 },
      { header: 'WORKFLOW', max: 32 },
      { header: 'STATUS' },
      { header: 'ATTEMPTS', align: 'right' as const },
      { header: 'AGE', align: 'right' as const },
      { header: 'LEASE LEFT / LAST ERROR', max: 70 },
    ];
    context.line(renderTable(columns, runs.map(row)));
    const stuck = runs.filter((run) => run.status === 'stuck').length;
    context.line('');
    context.line(`${plural(runs.length, 'run')}${runs.length === filter.limit ? ` (limit ${filter.limit}; --limit N for more)` : ''}.`);
    if (stuck > 0) context.line(`${plural(stuck, 'stuck run')}: no worker has resumed it — is \`stepkey worker\` running?`);
    return ExitCode.ok;
  },
};

function row(run: ListedRun): string[] {
  return [
    run.scope,
    run.key,
    `${run.workflow}@${run.version}`,
    run.status === 'failed' && run.resumable ? 'failed (resumable)' : run.status,
    String(run.attempts),
    formatDuration(run.ageMs),
    detail(run),
  ];
}

function detail(run: ListedRun): string {
  switch (run.status) {
    case 'running':
      return `lease ${formatDuration(run.leaseLeftMs ?? 0)} left`;
    case 'stuck':
      return `lease expired ${formatDuration(-(run.leaseLeftMs ?? 0))} ago`;
    case 'failed':
    case 'cancelled':
      return errorMessage(run.error);
    default:
      return '';
  }
}

function parseStored(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function optional<K extends string>(name: K, value: string | undefined): Partial<Record<K, string>> {
  return value === undefined ? {} : ({ [name]: value } as Record<K, string>);
}
