/**
 * `stepkey runs`: the runs an operator should look at first — stuck ones
 * (lease expired, nobody resuming), then failed, then running, then the rest.
 */
import { systemClock } from '../../db/clock.js';
import { positiveIntFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { ExitCode, UsageError } from '../errors.js';
import { errorLine, formatDuration, plural, relative } from '../format.js';
import { isRunStatusName, runStatusNames } from '../../read/run-status.js';
import { listRuns, type ListedRun } from '../../read/sql/runs.js';
import { renderTable } from '../table.js';
import { queueJson } from '../inspect-render.js';

export const runsCommand: Command = {
  name: 'runs',
  description: `
Lists workflow runs with their scope, key, workflow@version, status, attempts,
age, and the lease left (running), how long ago it expired (stuck: the process
died and no worker's sweeper took it over — is a worker running?) or the last
error (failed, errored), or what a waiting run waits for and until when — for
a queued run (engine.enqueue), its queue, partition and position in its
partition's line (#1 starts next; dispatch's order: priority, then first
enqueued; --json has the priority and the queue's depth too).
Statuses: ${runStatusNames.join(', ')}. A failed run (its retries ran out)
goes on with the next call with its key, or \`stepkey resume\`; an errored run
ended with a stored error and replays it; a run that needs review waits for
\`stepkey resolve\`; a waiting run continues on its own when due.`,
  positionals: [],
  options: {
    status: { type: 'string', value: 'STATUS', description: runStatusNames.join('|') },
    workflow: { type: 'string', value: 'NAME', description: 'only runs of this workflow' },
    scope: { type: 'string', value: 'S', description: 'only runs in this scope' },
    limit: { type: 'string', value: 'N', description: 'at most N runs (default 50)' },
  },
  async run(context, parsed) {
    const status = stringFlag(parsed.values, 'status');
    if (status !== undefined && !isRunStatusName(status)) {
      throw new UsageError(`--status must be one of ${runStatusNames.join(', ')}; got '${status}'.`, 'runs');
    }
    const filter = {
      limit: positiveIntFlag(parsed.values, 'limit', 'runs') ?? 50,
      order: 'attention' as const,
      ...(status === undefined ? {} : { status }),
      ...optional('workflow', stringFlag(parsed.values, 'workflow')),
      ...optional('scope', stringFlag(parsed.values, 'scope')),
    };
    const { runs } = await context.withPool((database) => listRuns(database.sql, systemClock, filter));
    if (context.json) {
      context.printJson({
        runs: runs.map((run) => ({
          ...run,
          createdAt: new Date(run.createdAt).toISOString(),
          error: run.error === null ? null : parseStored(run.error),
          queue: run.queue === null ? null : queueJson(run.queue),
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
      return `lease ${formatDuration(run.leaseLeftMs ?? 0)} left${run.queue ? `, a slot of queue '${run.queue.queue}'` : ''}`;
    case 'stuck':
      return `lease expired ${formatDuration(-(run.leaseLeftMs ?? 0))} ago`;
    case 'needs_review':
      return `step '${run.waitStep}': outcome unknown — stepkey resolve`;
    case 'waiting':
      return waitDetail(run);
    case 'failed':
    case 'errored':
    case 'cancelled':
    case 'deadline_exceeded':
      return errorLine(run.error);
    default:
      return '';
  }
}

/**
 * What a waiting run waits for, and until when: `timer at nap.v1, due in 3m 05s`;
 * a queued one, its queue and place: `slot of queue 'reports' partition 'acme', #3 of 12`.
 */
function waitDetail(run: ListedRun): string {
  if (run.waitKind === 'slot' && run.queue) {
    const place = run.queue;
    const partition = place.partition === '' ? '' : ` partition '${place.partition}'`;
    const priority = place.priority === 0 ? '' : `, priority ${place.priority}`;
    return `slot of queue '${place.queue}'${partition}, #${place.position ?? '?'} of ${place.partitionWaiting}${priority}`;
  }
  const what =
    run.waitKind === 'event'
      ? `event '${run.waitFor}'`
      : run.waitKind === 'child'
        ? `child run ${run.waitFor}`
        : run.waitKind === 'limit'
          ? `step limit '${run.waitFor}'`
          : (run.waitKind ?? 'wait');
  const due = run.wakeAt === null ? '' : `, due ${relative(run.wakeAt - (run.createdAt + run.ageMs))}`;
  return `${what} at ${run.waitStep ?? '?'}${due}`;
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
