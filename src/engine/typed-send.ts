/**
 * The typed send: `engine.send`'s two forms resolved to one call.
 *
 * Typed by a workflow — `send(approval, { scope, key }, 'approved', payload,
 * { key })`, or a ref from `approval.ref({ scope, key })` or a handle — the
 * topic and payload are checked by type (Engine's overloads), and a run of
 * another workflow is refused (`workflow_mismatch`) before anything is
 * stored. A bare `{ scope, key }` is untyped.
 */
import type { Workflow } from '../workflow/define.js';
import type { RunRef } from '../workflow/handles.js';
import { sendEvent, type Sent } from '../workflow/waits/send.js';
import type { EngineCore } from './core.js';
import { assertValidRef } from './options.js';
import { isWorkflow } from './typed-doors.js';

export interface SendArguments {
  ref: RunRef;
  topic: unknown;
  payload: unknown;
  options: { key: string };
  /** The workflow the send is typed by, whose run the target must be. */
  workflow: string | undefined;
}

/** send(workflow, ref, topic, payload, options) or send(ref, topic, payload, options), the ref perhaps carrying its workflow. */
function sendArguments(args: readonly unknown[]): SendArguments {
  if (isWorkflow(args[0])) {
    const [workflow, ref, topic, payload, options] = args as [Workflow, RunRef, unknown, unknown, { key: string }];
    return { ref, topic, payload, options, workflow: workflow.name };
  }
  const [ref, topic, payload, options] = args as [RunRef, unknown, unknown, { key: string }];
  return { ref, topic, payload, options, workflow: isWorkflow(ref?.workflow) ? ref.workflow.name : undefined };
}

/** `engine.send(...args)`: the event stored in the run's mailbox, and the run woken here if it was waiting for it. */
export async function sendTo(core: EngineCore, args: readonly unknown[]): Promise<Sent> {
  const { ref, topic, payload, options, workflow } = sendArguments(args);
  assertValidRef(ref);
  const sent = await sendEvent(core.deps, ref, String(topic), payload, options, workflow);
  if (sent.woke) core.waker.wake(ref);
  return { delivered: sent.delivered, seq: sent.seq };
}
