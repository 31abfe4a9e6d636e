/**
 * Flow control's side of a child run started on a queue
 * (`steps.x.child(workflow, input, { queue })`, src/workflow/waits/queued-child.ts):
 * the child's entry is computed as engine.enqueue computes a run's (the queue
 * registered, the priority in range, partitionBy on the child's parsed
 * input), and put in line in the parent's step transaction without the
 * queue's lock, as an enqueue that finds the lock held puts its run (an entry
 * waiting is never a slot granted): the parent's commit never waits behind a
 * dispatch. Only dispatch starts the child, under the queue's lock, after
 * that commit, so the queue's concurrency — whole and per partition — counts
 * children exactly like runs enqueued by the engine.
 */
import type { Clock } from '../db/clock.js';
import type { ChildQueues } from '../workflow/waits/queued-child.js';
import { assertValidPriority, partitionOf } from './define-queue.js';
import type { FlowControl } from './flow-control.js';
import { insertEntryStatement } from './sql/enqueue.js';

export function childQueues(flow: FlowControl, clock: Clock, dispatchQueue: (queue: string, freeing: number) => void): ChildQueues {
  return {
    entry(_workflow, child, input, options) {
      const queue = flow.require(typeof options.queue === 'string' ? options.queue : options.queue?.name);
      const priority = options.priority ?? 0;
      assertValidPriority(priority);
      return { queue: queue.name, partition: partitionOf(queue, input, child), priority, delayMs: 0 };
    },
    ready: () => flow.ready(),
    statements: (q, child, entry) => [insertEntryStatement(q, clock, child, entry)],
    dispatch: (queue, parentParks) => dispatchQueue(queue, parentParks ? 1 : 0),
  };
}
