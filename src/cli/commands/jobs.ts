/**
 * `stepkey jobs`: the outbox's jobs in graphile-worker — failed ones first —
 * and `--retry` to run failed jobs again by hand (attempts reset, max attempts
 * restored, due now).
 */
import { listJobs, type JobRow } from '../../read/sql/jobs.js';
import { retryJobsAction } from '../../actions/retry-jobs.js';
import { systemClock } from '../../db/clock.js';
import { cliActor } from '../actor.js';
import { positiveIntFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { CliFailure, ExitCode, UsageError } from '../errors.js';
import { errorMessage, plural, relative } from '../format.js';
import { renderTable } from '../table.js';

const statuses = ['failed', 'retrying', 'pending', 'running'] as const;

export const jobsCommand: Command = {
  name: 'jobs',
  description: `
Lists the jobs waiting in graphile-worker: failed for good (attempts used up,
or a permanent error such as a 4xx from a webhook), retrying (failed at least
once, due again later), pending, running. With --retry ID,ID… the given failed
jobs are due again now with their attempts reset — a job failed for good by a
permanent error gets back the max attempts it had; each retry is recorded in
the audit log. Exit 1 if one of them could not be retried (unknown, or locked
by a running worker).`,
  positionals: [],
  options: {
    status: { type: 'string', value: 'S', description: `only jobs with this status (${statuses.join(', ')})` },
    limit: { type: 'string', value: 'N', description: 'at most N jobs (default 100)' },
    retry: { type: 'string', value: 'IDS', description: 'comma-separated ids of jobs to retry now' },
  },
  async run(context, parsed) {
    const status = stringFlag(parsed.values, 'status');
    if (status !== undefined && !(statuses as readonly string[]).includes(status)) {
      throw new UsageError(`--status must be one of ${statuses.join(', ')}, not '${status}'.`, 'jobs');
    }
    const retry = stringFlag(parsed.values, 'retry');
    if (retry !== undefined) {
      const ids = retry.split(',').map((id) => id.trim()).filter(Boolean);
      if (ids.length === 0 || ids.some((id) => !/^\d+$/.test(id))) {
        throw new UsageError(`--retry takes job ids such as 12,13, not '${retry}'.`, 'jobs');
      }
      const { retried, missed } = await context.withPool((database) => retryJobsAction(database.sql, systemClock, ids, cliActor()));
      if (context.json) context.printJson({ retried, missed });
      else context.line(`Retried ${plural(retried.length, 'job')}${retried.length ? `: ${retried.join(', ')}` : ''}.`);
      if (missed.length) throw new CliFailure('not_retried', `Not retried (unknown or locked): ${missed.join(', ')}.`);
      return ExitCode.ok;
    }
    const limit = positiveIntFlag(parsed.values, 'limit', 'jobs') ?? 100;
    const jobs = await context.withPool((database) =>
      listJobs(database.sql, { ...(status ? { status: status as JobRow['status'] } : {}), limit }),
    );
    if (context.json) {
      context.printJson({ jobs });
      return ExitCode.ok;
    }
    if (jobs.length === 0) {
      context.line('No jobs.');
      return ExitCode.ok;
    }
    context.line(
      renderTable(
        [{ header: 'id', align: 'right' }, { header: 'task' }, { header: 'key', max: 20 }, { header: 'status' }, { header: 'attempts' }, { header: 'next run' }, { header: 'last error', max: 60 }],
        jobs.map((job) => [
          job.id,
          job.task,
          job.key ?? '',
          job.status,
          `${job.attempts}/${job.maxAttempts}`,
          job.status === 'failed' ? '—' : relative(job.runAt - Date.now()),
          errorMessage(job.lastError),
        ]),
      ),
    );
    return ExitCode.ok;
  },
};
