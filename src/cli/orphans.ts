/**
 * Which runs and jobs in the database the app as it is now would strand:
 * runs of a workflow version it no longer registers, runs that recorded a step
 * name their version no longer declares, and jobs of tasks it no longer
 * consumes (stepkey's own `stepkey:*` tasks aside).
 *
 * In-progress and failed runs are live: they will resume, so they make
 * `check` fail. Completed runs only replay their stored outcome, which needs
 * no definition: they are reported as notes until they expire.
 */
import type { Queryable } from '../db/connect.js';
import { systemClock } from '../db/clock.js';
import type { Effect } from '../outbox/effect.js';
import type { Workflow } from '../workflow/define.js';
import { plural } from './format.js';
import { jobsByTask, runsByVersion, stepsByVersion, type VersionUsage } from '../read/sql/live-usage.js';

export interface OrphanedRuns {
  kind: 'version_unregistered' | 'step_undeclared';
  workflow: string;
  version: number;
  step: string | null;
  status: VersionUsage['status'];
  live: boolean;
  runs: number;
  examples: { scope: string; key: string }[];
  message: string;
}

export interface OrphanedJobs {
  task: string;
  pending: number;
  failed: number;
  message: string;
}

export interface Orphans {
  runs: OrphanedRuns[];
  jobs: OrphanedJobs[];
  /** Live runs stranded: these fail the check. */
  live: number;
}

export async function findOrphans(q: Queryable, workflows: readonly Workflow[], effects: readonly Effect[]): Promise<Orphans> {
  const [versions, steps, tasks] = await Promise.all([runsByVersion(q, systemClock), stepsByVersion(q, systemClock), jobsByTask(q)]);
  const definition = (name: string, version: number) => workflows.find((w) => w.name === name && w.version === version);
  const runs: OrphanedRuns[] = [];
  for (const usage of versions) {
    if (definition(usage.workflow, usage.version)) continue;
    runs.push(orphan(usage, 'version_unregistered', null, 'which the app no longer registers'));
  }
  for (const usage of steps) {
    const workflow = definition(usage.workflow, usage.version);
    if (!workflow || Object.values(workflow.steps).some((step) => step.name === usage.step)) continue;
    runs.push(orphan(usage, 'step_undeclared', usage.step, `recorded step '${usage.step}', which that version no longer declares`));
  }
  const consumed = new Set(effects.map((effect) => effect.name));
  const jobs = tasks
    .filter((task) => !consumed.has(task.task) && !task.task.startsWith('stepkey:'))
    .map((task) => ({
      ...task,
      message:
        `${plural(task.pending, 'pending job')} and ${plural(task.failed, 'failed job')} of '${task.task}', ` +
        'an effect the app no longer defines: no worker of this app would consume them',
    }));
  runs.sort((a, b) => Number(b.live) - Number(a.live));
  return { runs, jobs, live: runs.filter((entry) => entry.live).reduce((sum, entry) => sum + entry.runs, 0) };
}

function orphan(usage: VersionUsage, kind: OrphanedRuns['kind'], step: string | null, what: string): OrphanedRuns {
  const live = usage.status !== 'completed';
  const examples = usage.keys.map((key, index) => ({ scope: usage.scopes[index] ?? '', key }));
  const shown = examples.map((example) => `${example.scope} / ${example.key}`).join(', ');
  const status = usage.status === 'in_progress' ? 'in-progress' : usage.status;
  const consequence = live
    ? kind === 'version_unregistered'
      ? 'they would fail with version_not_found when resumed'
      : 'resuming them would not find that step and run its replacement again'
    : 'replays still work from the stored outcome until they expire';
  return {
    kind,
    workflow: usage.workflow,
    version: usage.version,
    step,
    status: usage.status,
    live,
    runs: usage.runs,
    examples,
    message:
      `${plural(usage.runs, `${status} run`)} of ${usage.workflow}@${usage.version} ${what}: ${consequence} ` +
      `(e.g. ${shown}${usage.runs > examples.length ? ', …' : ''})`,
  };
}
