/**
 * A child run started on a queue: `steps.x.child(workflow, input, { queue })`.
 * The child's row is inserted as any child's, then — in the same transaction
 * as the parent's step — put in line on the queue and parked waiting for a
 * slot, exactly as `engine.enqueue` parks a run; only the queue's dispatch
 * starts it, so the queue's concurrency (whole and per partition) counts
 * children like any other run. Queues are flow control's (src/flow, a higher
 * layer): the engine registers them here as `ChildQueues`.
 */
import type postgres from 'postgres';
import type { Queryable } from '../../db/connect.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import type { KeyRef } from '../../ledger/types.js';
import type { Workflow } from '../define.js';
import type { StepUse } from '../handles.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** How a child step starts its child: at once (default), or on a queue. */
export interface ChildOptions extends StepUse {
  /** The queue (registered with the engine, by object or name) the child waits on for a slot before it starts. */
  queue?: { name: string } | string;
  /** With `queue`: whole number from -1000 to 1000 (default 0); higher starts first within the queue. */
  priority?: number;
}

/** A queued child's place in line, as flow control computed it from the queue's definition. */
export interface ChildEntry {
  queue: string;
  partition: string;
  priority: number;
  delayMs: number;
}

/** What children need of flow control (src/flow registers it with the engine). */
export interface ChildQueues {
  /** Checks the queue (registered here) and priority, and computes the child's entry from its parsed input; a clear error otherwise. */
  entry(workflow: Workflow, child: KeyRef, input: unknown, options: ChildOptions): ChildEntry;
  /** Resolves once the queues' settings are on their rows (before the first child goes in line). */
  ready(): Promise<void>;
  /** In the parent's step transaction, after the child's row: the queue's locks, then the child's entry. */
  statements(q: Queryable, child: KeyRef, entry: ChildEntry): Statement[];
  /**
   * After the commit: dispatches the queue, so that the child starts at once
   * here if a slot is free. `parentParks`: the parent waits for the child, so
   * its execution here is about to end and its place may go to the child.
   */
  dispatch(queue: string, parentParks: boolean): void;
}

/** The child's options, checked: a bad value is a clear error naming the step. */
export function childOptions(where: string, options: ChildOptions | undefined): ChildOptions {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null) {
    throw new StepkeyError('invalid_options', `${where}: the options of a child must be an object ({ id?, queue?, priority? }), got ${String(options)}.`);
  }
  if (options.priority !== undefined && options.queue === undefined) {
    throw new StepkeyError('invalid_options', `${where}: priority ${String(options.priority)} needs a queue ({ queue, priority }).`);
  }
  return options;
}

/** The registered queues, or a clear error when the engine registers none. */
export function requireChildQueues(where: string, queues: ChildQueues | undefined, queue: ChildOptions['queue']): ChildQueues {
  if (!queues) {
    const name = typeof queue === 'string' ? queue : queue?.name;
    throw new StepkeyError(
      'invalid_options',
      `${where}: queue '${String(name)}' is not registered with this engine (registered: none); pass it in createEngine({ queues }).`,
    );
  }
  return queues;
}
