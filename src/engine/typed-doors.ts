/**
 * The typed read: a run read back with its output parsed and typed
 * (`engine.get(workflow, ref)`), and the workflow versions an engine's type
 * registers. (The typed send is typed-send.ts.)
 *
 * A read is typed as the union of the outputs of every version of the
 * workflow that the engine's type registers (createEngine's `workflows`), and
 * parsed with the run's own version's schema — an old run is read as its
 * version wrote it. A run of another workflow is `workflow_mismatch`.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { KeyRef } from '../ledger/types.js';
import { readRunInfo, type RunInfo } from '../read/run-info.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import type { WorkflowRegistry } from '../workflow/registry.js';
import { decodeValue } from '../workflow/values.js';
import { workflowMismatchError } from '../workflow/workflow-mismatch.js';
import { inDatabase, type EngineCore } from './core.js';
import { assertValidRef } from './options.js';

/** What createEngine's type registers for its `workflows`: any workflow when it is given none by type. */
export type RegisteredOf<W extends Workflow> = [W] extends [never] ? Workflow : W;

/**
 * The versions of `W`'s workflow among `Registered` (by name), or `W` alone
 * when the engine's type does not know them (an engine typed as plain
 * `Engine`, or a workflow whose name is not a literal).
 */
export type VersionsOf<Registered, W extends Workflow> = string extends W['name']
  ? W
  : [Extract<Registered, { readonly name: W['name'] }>] extends [never]
    ? W
    : Extract<Registered, { readonly name: W['name'] }>;

/** What `engine.get(workflow, ref)` types a run's output as: the union of its registered versions' results. */
export type RunOutput<Registered, W extends Workflow> = WorkflowResult<VersionsOf<Registered, W>>;

/** A run read back by `engine.get(workflow, ref)`: RunInfo with the output parsed (present once the run completed). */
export type TypedRunInfo<Output> = Omit<RunInfo, 'output'> & {
  /** The run's result, parsed with its own version's output schema. */
  output?: Output;
};

export const isWorkflow = (value: unknown): value is Workflow =>
  typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'stepkey.workflow';

/** A RunInfo of `workflow`'s run with its output parsed by the run's own version; workflow_mismatch for another's. */
export function typedRunInfo(registry: WorkflowRegistry, workflow: Workflow, ref: KeyRef, info: RunInfo): TypedRunInfo<unknown> {
  if (info.workflow !== workflow.name) {
    throw workflowMismatchError(
      ref,
      workflow.name,
      { name: info.workflow, version: info.version },
      'read the run',
      `Read it with engine.get(${info.workflow || 'its workflow'}, ref), or untyped with engine.get(ref).`,
    );
  }
  const { output, ...rest } = info;
  if (output === undefined) return rest;
  const definition = info.version === null ? undefined : registry.get(info.workflow, info.version);
  if (!definition) {
    const versions = registry.versions(info.workflow);
    throw new StepkeyError(
      'version_not_found',
      `Cannot parse the output of run '${ref.key}' in scope '${ref.scope}': it ran workflow '${info.workflow}' version ${info.version}, ` +
        `which this engine does not register (registered: ${versions.length ? versions.join(', ') : 'none'}). ` +
        'Register that version in createEngine({ workflows }), or read its JSON text with engine.get(ref).',
    );
  }
  return { ...rest, output: decodeValue(output, definition.output, `The output of run '${ref.key}' (workflow '${info.workflow}' v${info.version})`) };
}

/** `engine.get(ref)`, or `engine.get(workflow, ref)`: the run read back, typed by its workflow when one is given. */
export async function readRun(core: EngineCore, first: KeyRef | Workflow, second?: KeyRef): Promise<RunInfo | TypedRunInfo<unknown> | undefined> {
  const workflow = isWorkflow(first) ? first : undefined;
  const ref = (workflow ? second : first) as KeyRef;
  assertValidRef(ref);
  const info = await inDatabase('reading a run', () => readRunInfo(core.sql, ref));
  return workflow && info ? typedRunInfo(core.registry, workflow, ref, info) : info;
}
