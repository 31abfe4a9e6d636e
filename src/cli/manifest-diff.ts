/**
 * Comparing the committed manifest with the app as it is now. Whatever
 * disappeared is a problem, named one by one; whatever is new is fine.
 */
import type { Manifest } from './manifest.js';

export type Problem =
  | { kind: 'version_removed'; workflow: string; version: number; message: string }
  | { kind: 'step_removed'; workflow: string; version: number; step: string; renamedTo: string | null; message: string }
  | { kind: 'effect_removed'; effect: string; message: string };

export type Addition =
  | { kind: 'version_added'; workflow: string; version: number; message: string }
  | { kind: 'step_added'; workflow: string; version: number; step: string; message: string }
  | { kind: 'effect_added'; effect: string; message: string };

export interface ManifestDiff {
  problems: Problem[];
  additions: Addition[];
}

const minus = (a: readonly string[], b: readonly string[]) => a.filter((item) => !b.includes(item));

export function diffManifests(committed: Manifest, current: Manifest): ManifestDiff {
  const problems: Problem[] = [];
  const additions: Addition[] = [];
  for (const [workflow, versions] of Object.entries(committed.workflows)) {
    const now = current.workflows[workflow];
    for (const [versionText, steps] of Object.entries(versions)) {
      const version = Number(versionText);
      const currentSteps = now?.[versionText];
      const label = `workflow '${workflow}' version ${version}`;
      if (currentSteps === undefined) {
        problems.push({
          kind: 'version_removed',
          workflow,
          version,
          message:
            `${label} was removed${now ? '' : ' (no version of it is left)'}: its runs could no longer be resumed. ` +
            'Keep it registered until its runs have ended.',
        });
        continue;
      }
      const removed = minus(steps, currentSteps);
      const added = minus(currentSteps, steps);
      const renamedTo = removed.length === 1 && added.length === 1 ? added[0]! : null;
      for (const step of removed) {
        problems.push({
          kind: 'step_removed',
          workflow,
          version,
          step,
          renamedTo,
          message: renamedTo
            ? `${label}: step '${step}' was renamed to '${renamedTo}': a run that finished '${step}' would run ` +
              `'${renamedTo}' again. Keep the step name and put the change in version ${version + 1}.`
            : `${label}: step '${step}' was removed: runs of version ${version} recorded under it would resume ` +
              `under different code. Put the change in version ${version + 1}.`,
        });
      }
      for (const step of renamedTo ? [] : added) {
        additions.push({ kind: 'step_added', workflow, version, step, message: `${label}: step '${step}' added` });
      }
    }
  }
  for (const [workflow, versions] of Object.entries(current.workflows)) {
    for (const versionText of Object.keys(versions)) {
      if (committed.workflows[workflow]?.[versionText] === undefined) {
        const version = Number(versionText);
        additions.push({ kind: 'version_added', workflow, version, message: `workflow '${workflow}' version ${version} added` });
      }
    }
  }
  for (const effect of minus(committed.effects, current.effects)) {
    problems.push({
      kind: 'effect_removed',
      effect,
      message: `effect '${effect}' was removed: jobs already enqueued for it would never be consumed. ` +
        'Keep its consumer until they are done.',
    });
  }
  for (const effect of minus(current.effects, committed.effects)) {
    additions.push({ kind: 'effect_added', effect, message: `effect '${effect}' added` });
  }
  return { problems, additions };
}
