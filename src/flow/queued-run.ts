/**
 * Everything an enqueue checks before it touches the database: the queue is
 * registered, the priority and delay are in range, the input parses, the
 * partition can be computed. A bad value is a clear error, and nothing is
 * stored.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { toJsonText } from '../ledger/outcome.js';
import { checkedExclude } from '../keys/fingerprint.js';
import type { KeyRef } from '../ledger/types.js';
import type { Workflow } from '../workflow/define.js';
import { resolveDeadline, type Deadline, type ResolvedDeadline } from '../lifecycle/deadline.js';
import { summarise } from '../workflow/values.js';
import { assertValidPriority, partitionOf } from './define-queue.js';
import type { EnqueueOptions } from './enqueue.js';
import type { FlowControl } from './flow-control.js';
import type { EntryValues } from './sql/enqueue.js';

export interface QueuedRun {
  data: unknown;
  inputText: string;
  entry: EntryValues;
  /** What the run's fingerprint covers: the input as given, the queue and the priority. */
  fingerprinted: unknown;
  validatedFingerprinted: unknown;
  /** The volatile input fields left out of it (`exclude`), as paths into `fingerprinted`. */
  exclude?: string[];
  /** Its deadline (the start's, or its workflow's). */
  deadline: ResolvedDeadline | undefined;
}

export function queuedRun(
  flow: FlowControl,
  definition: Workflow,
  ref: KeyRef,
  input: unknown,
  options: EnqueueOptions & { deadline?: Deadline; exclude?: readonly string[] },
): QueuedRun {
  if (!options || typeof options !== 'object') {
    throw new StepkeyError('invalid_options', 'enqueue needs options with a queue: { queue, priority?, delayMs? }.');
  }
  const queue = flow.require(typeof options.queue === 'string' ? options.queue : options.queue?.name);
  const priority = options.priority ?? 0;
  assertValidPriority(priority);
  const delayMs = options.delayMs ?? 0;
  if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
    throw new StepkeyError('invalid_options', `delayMs must be a number of ms, 0 or more, got ${String(delayMs)}.`);
  }
  const parsed = definition.input.safeParse(input);
  if (!parsed.success) {
    throw new StepkeyError('invalid_input', `The input of workflow '${definition.name}' is invalid: ${summarise(parsed.error)}.`, {
      cause: parsed.error,
    });
  }
  const partition = partitionOf(queue, parsed.data, { scope: ref.scope, key: ref.key });
  const deadline = resolveDeadline(options.deadline, `Enqueueing workflow '${definition.name}'`) ?? definition.deadline;
  return {
    data: parsed.data,
    inputText: toJsonText(parsed.data, `input of workflow '${definition.name}'`),
    entry: { queue: queue.name, partition, priority, delayMs },
    fingerprinted: { input, queue: queue.name, priority },
    validatedFingerprinted: { input: parsed.data, queue: queue.name, priority },
    ...(options.exclude !== undefined ? { exclude: withinInput(options.exclude) } : {}),
    deadline,
  };
}

/** `exclude`'s paths into the input, checked, as paths into `fingerprinted` (`{ input, queue, priority }`). */
function withinInput(exclude: readonly string[]): string[] {
  return checkedExclude(exclude).map((path) => `input.${path}`);
}
