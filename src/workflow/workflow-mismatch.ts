/**
 * The error of a typed door — `engine.get(workflow, ref)`, `engine.send` with
 * a workflow or a workflow's ref — whose run belongs to another workflow: the
 * types it promised would be a lie, so nothing is read or stored.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { KeyRef } from '../ledger/types.js';

export function workflowMismatchError(ref: KeyRef, expected: string, run: { name: string | null; version: number | null }, doing: string, fix: string): StepkeyError {
  const actual = run.name ? `workflow '${run.name}'${run.version === null ? '' : ` v${run.version}`}` : 'no workflow';
  return new StepkeyError(
    'workflow_mismatch',
    `Cannot ${doing} as workflow '${expected}': run '${ref.key}' in scope '${ref.scope}' is a run of ${actual}, not of workflow '${expected}'. ${fix}`,
    { details: { scope: ref.scope, key: ref.key, expected, actual: run.name, version: run.version } },
  );
}
