/** The workflows an engine can run: every registered version of each. */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Workflow } from './define.js';

export class WorkflowRegistry {
  readonly #byName = new Map<string, Map<number, Workflow>>();

  constructor(workflows: readonly Workflow[]) {
    for (const workflow of workflows) this.add(workflow);
  }

  add(workflow: Workflow): void {
    if (workflow?.kind !== 'stepkey.workflow') {
      throw new StepkeyError('definition_error', 'Only workflows made with defineWorkflow() can be registered.');
    }
    const versions = this.#byName.get(workflow.name) ?? new Map<number, Workflow>();
    const existing = versions.get(workflow.version);
    if (existing && existing !== workflow) {
      throw new StepkeyError(
        'definition_error',
        `Workflow '${workflow.name}' version ${workflow.version} is registered twice with different definitions.`,
      );
    }
    versions.set(workflow.version, workflow);
    this.#byName.set(workflow.name, versions);
  }

  get(name: string, version: number): Workflow | undefined {
    return this.#byName.get(name)?.get(version);
  }

  /** The definition itself, or a clear error if it was never registered. */
  require(workflow: Workflow): Workflow {
    const registered = this.get(workflow?.name, workflow?.version);
    if (!registered) {
      throw new StepkeyError(
        'workflow_not_found',
        `Workflow '${workflow?.name}' version ${workflow?.version} is not registered with this engine; ` +
          'pass it in createEngine({ workflows }).',
      );
    }
    return registered;
  }

  /** The registered versions of a workflow, for error messages. */
  versions(name: string): number[] {
    return [...(this.#byName.get(name)?.keys() ?? [])].sort((a, b) => a - b);
  }

  all(): Workflow[] {
    return [...this.#byName.values()].flatMap((versions) => [...versions.values()]);
  }
}
