/**
 * A crash scenario: what the crash kit's child processes run. Write one per
 * workflow you want to prove, in a module of its own whose default export is
 * defineCrashScenario({...}); the kit imports it in every child.
 */
import type { Effect } from '../outbox/effect.js';
import type { KeyRef } from '../ledger/types.js';
import type { Workflow } from '../workflow/define.js';

export interface CrashScenario {
  /** The workflow under test. */
  workflow: Workflow;
  /** Every workflow version the engine must know (default: just `workflow`). */
  workflows?: Workflow[];
  /** Effects a worker consumes during the test (their consumers run in worker children). */
  effects?: Effect[];
  /** The input of the run with this scope and key. */
  input: (ref: KeyRef) => unknown;
}

export function defineCrashScenario(scenario: CrashScenario): CrashScenario {
  return scenario;
}
