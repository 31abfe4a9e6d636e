/**
 * The commands of `stepkey`: each one's name, its line in `stepkey --help`,
 * and the module that implements it — imported only when that command runs
 * (or prints its own help), so that no command loads what another needs.
 */
import type { Command } from '../context.js';

export interface CommandEntry {
  name: string;
  /** One line for `stepkey --help`. */
  summary: string;
  load(): Promise<Command>;
}

export const commands: readonly CommandEntry[] = [
  {
    name: 'migrate',
    summary: "apply stepkey's, graphile-worker's and the app's migrations",
    load: async () => (await import('./migrate.js')).migrateCommand,
  },
  {
    name: 'worker',
    summary: "run the app's effects, schedules and queues, and resume crashed runs, until SIGTERM/SIGINT",
    load: async () => (await import('./worker.js')).workerCommand,
  },
  {
    name: 'purge',
    summary: 'delete expired keys, inbox rows and stopped worker pools once',
    load: async () => (await import('./purge.js')).purgeCommand,
  },
  {
    name: 'inspect',
    summary: 'show a run (or request, effect, step) and every key derived from it',
    load: async () => (await import('./inspect.js')).inspectCommand,
  },
  {
    name: 'runs',
    summary: 'list runs: stuck first, then needing review, failed, running, the rest',
    load: async () => (await import('./runs.js')).runsCommand,
  },
  {
    name: 'queues',
    summary: 'queues and step limits, per partition: depth, running, recent starts per second',
    load: async () => (await import('./queues.js')).queuesCommand,
  },
  {
    name: 'cancel',
    summary: 'cancel a running, waiting, needs-review or failed run',
    load: async () => (await import('./cancel.js')).cancelCommand,
  },
  {
    name: 'resume',
    summary: 'make a failed or stuck run due for a worker (--here: continue it here)',
    load: async () => (await import('./resume.js')).resumeCommand,
  },
  {
    name: 'resolve',
    summary: 'say what an at-most-once call that needs review did (--output) or call it again (--retry)',
    load: async () => (await import('./resolve.js')).resolveCommand,
  },
  {
    name: 'rerun',
    summary: 'start a new run that takes the steps before a step from an old run and executes the rest',
    load: async () => (await import('./rerun.js')).rerunCommand,
  },
  {
    name: 'jobs',
    summary: 'list outbox jobs (failed first); --retry runs failed ones again',
    load: async () => (await import('./jobs.js')).jobsCommand,
  },
  {
    name: 'check',
    summary: 'check the step-name contract (manifest) and find runs a deploy would strand',
    load: async () => (await import('./check.js')).checkCommand,
  },
  {
    name: 'dashboard',
    summary: 'serve the web dashboard (127.0.0.1 by default) until SIGTERM/SIGINT',
    load: async () => (await import('./dashboard.js')).dashboardCommand,
  },
];
