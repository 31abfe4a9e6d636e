/**
 * `stepkey worker`: runs graphile-worker with the app's effect consumers, the
 * sweeper that resumes runs whose process died, the dead-pool unlock and the
 * purge cron, until SIGTERM or SIGINT (then it drains and exits 0).
 */
import { loadAppModule } from '../app-module.js';
import { positiveIntFlag } from '../args.js';
import { describeUrl, type Command } from '../context.js';
import { ExitCode } from '../errors.js';
import { plural } from '../format.js';

export const workerCommand: Command = {
  name: 'worker',
  description: `
Starts a worker for the app module's workflows and effects: graphile-worker
runs the effect consumers, a sweeper resumes runs whose lease expired, jobs of
dead workers are unlocked, and expired keys are purged every minute. Prints the
worker pool's id (the id its jobs are locked under). On SIGTERM or SIGINT it
stops taking work, lets jobs in flight finish, releases run leases and exits 0.
If graphile-worker stops by itself (a Postgres restart), a new runner takes
over under a new pool id, with backoff while the database is down; only when
none can go on (a breaking migration of its schema, an error retrying cannot
fix) does the worker stop and exit 1.
Lease length: STEPKEY_LEASE_MS (default 8000).`,
  positionals: [],
  options: {
    concurrency: { type: 'string', value: 'N', description: 'jobs run at once (default 10)' },
  },
  async run(context, parsed) {
    const concurrency = positiveIntFlag(parsed.values, 'concurrency', 'worker');
    const url = context.databaseUrl();
    const app = await loadAppModule(context, { required: true });
    const { runWorker } = await import('../../worker/run-worker.js');
    const worker = await runWorker({
      database: url,
      workflows: app.workflows,
      effects: app.effects,
      handleSignals: true,
      ...(concurrency === undefined ? {} : { concurrency }),
      onError: (error, where) => context.warn(`stepkey worker: ${where}: ${error instanceof Error ? error.message : String(error)}`),
    });
    if (context.json) {
      context.io.stdout(`${JSON.stringify({ poolId: worker.poolId, workflows: app.workflows.length, effects: app.effects.length })}\n`);
    } else {
      context.line(
        `stepkey worker pool ${worker.poolId} running on ${describeUrl(url)}: ` +
          `${plural(app.workflows.length, 'workflow version')}, ${plural(app.effects.length, 'effect')}, ` +
          `concurrency ${concurrency ?? 10}. Stop with SIGTERM or Ctrl-C.`,
      );
    }
    // runWorker's signal handlers stop the worker and exit the process. A graphile-worker runner that
    // stops by itself is replaced; if none can go on, `closed` rejects: the error is printed, exit code 1.
    await worker.closed;
    return ExitCode.ok;
  },
};
