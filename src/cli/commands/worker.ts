/**
 * `stepkey worker`: runs everything the app module declares — graphile-worker
 * with its effect consumers and its schedules' ticks, the sweeper that resumes
 * runs whose process died and dispatches its queues, its step limits, the
 * dead-pool unlock and the purge cron — until SIGTERM or SIGINT (then it
 * drains and exits 0). It says at start what it runs.
 */
import type { Limit } from '../../flow/define-limit.js';
import type { AppModule } from '../app-module.js';
import { loadAppModule } from '../app-module.js';
import { positiveIntFlag } from '../args.js';
import { describeUrl, type CliContext, type Command } from '../context.js';
import { ExitCode } from '../errors.js';
import { plural } from '../format.js';

export const workerCommand: Command = {
  name: 'worker',
  description: `
Starts a worker for everything the app module exports: graphile-worker runs
the effect consumers and fires the schedules' ticks (each tick starts one run),
a sweeper resumes runs whose lease expired and dispatches the runs waiting on
the app's queues, steps take from the app's limits, jobs of dead workers are
unlocked, and expired keys are purged every minute. It prints the worker pool's
id (the id its jobs are locked under) and what it runs. An app module that
exports a definition outside its lists (a schedule not in \`schedules\`) is
refused. On SIGTERM or SIGINT it stops taking work, lets jobs in flight finish,
releases run leases and exits 0. If graphile-worker stops by itself (a Postgres
restart), a new runner takes over under a new pool id, with backoff while the
database is down; only when none can go on (a breaking migration of its schema,
an error retrying cannot fix) does the worker stop and exit 1.
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
      schedules: app.schedules,
      queues: app.queues,
      limits: app.limits,
      handleSignals: true,
      ...(concurrency === undefined ? {} : { concurrency }),
      onError: (error, where) => context.warn(`stepkey worker: ${where}: ${error instanceof Error ? error.message : String(error)}`),
    });
    announce(context, app, { poolId: worker.poolId, url, concurrency: concurrency ?? 10 });
    // runWorker's signal handlers stop the worker and exit the process. A graphile-worker runner that
    // stops by itself is replaced; if none can go on, `closed` rejects: the error is printed, exit code 1.
    await worker.closed;
    return ExitCode.ok;
  },
};

/** The limits the worker's steps take from: the app's, and those its steps bring by definition. */
function limitsOf(app: AppModule): Limit[] {
  const limits = new Map(app.limits.map((limit) => [limit.name, limit]));
  for (const workflow of [...app.workflows, ...app.schedules.map((schedule) => schedule.workflow)]) {
    for (const step of Object.values(workflow.steps)) {
      if (step.limitDefinition && !limits.has(step.limitDefinition.name)) limits.set(step.limitDefinition.name, step.limitDefinition as Limit);
    }
  }
  return [...limits.values()];
}

function announce(context: CliContext, app: AppModule, started: { poolId: string; url: string; concurrency: number }): void {
  const limits = limitsOf(app);
  const runs = {
    workflows: app.workflows.map((workflow) => `${workflow.name}@${workflow.version}`),
    effects: app.effects.map((effect) => effect.name),
    schedules: app.schedules.map(
      (schedule) => `${schedule.name} (${schedule.cron} UTC: ${schedule.workflow.name}@${schedule.workflow.version} in scope '${schedule.scope}')`,
    ),
    queues: app.queues.map((queue) => `${queue.name} (${plural(queue.concurrency, 'slot')}${queue.perPartition ? `, ${queue.perPartition} per partition` : ''})`),
    limits: limits.map((limit) => {
      const rate = limit.rateLimit ? [`${limit.rateLimit.limit} per ${limit.rateLimit.periodMs} ms`] : [];
      return `${limit.name} (${[...rate, ...(limit.concurrency ? [`${limit.concurrency} at once`] : [])].join(', ')})`;
    }),
  };
  if (context.json) {
    context.io.stdout(
      `${JSON.stringify({
        poolId: started.poolId,
        workflows: app.workflows.length,
        effects: app.effects.length,
        schedules: app.schedules.length,
        queues: app.queues.length,
        limits: limits.length,
        runs,
      })}\n`,
    );
    return;
  }
  context.line(
    `stepkey worker pool ${started.poolId} running on ${describeUrl(started.url)}: ` +
      `${plural(app.workflows.length, 'workflow version')}, ${plural(app.effects.length, 'effect')}, ` +
      `${plural(app.schedules.length, 'schedule')}, ${plural(app.queues.length, 'queue')}, ${plural(limits.length, 'step limit')}, ` +
      `concurrency ${started.concurrency}. Stop with SIGTERM or Ctrl-C.`,
  );
  for (const [name, items] of Object.entries(runs)) {
    if (items.length > 0) context.line(`  ${name.padEnd(9)}  ${items.join(', ')}`);
  }
}
