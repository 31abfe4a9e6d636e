/**
 * What a workflow procedure or route answers (202) while its run waits: the
 * key, and what the run waits for — until when, for which event or child run.
 * A repeat while it waits gets the same, marked Idempotent-Replayed. It holds
 * only what stays true while the run waits, so that a repeat answers it byte
 * for byte.
 */
import type { RunWaitView } from '../lifecycle/wait.js';

export interface WaitingAnswer {
  key: string;
  status: 'waiting';
  /** timer, event, child (and, with flow control, slot or limit; review for an operator). */
  waitingFor: RunWaitView['kind'];
  step: string;
  /** ISO time when it is due (a timer; an event's deadline). */
  until?: string;
  /** The event it waits for. */
  topic?: string;
  /** The child run (its key, in the same scope) it waits for. */
  child?: string;
  /** The queue a queued run waits on for a slot (its position: engine.get(ref).queue). */
  queue?: string;
}

export function waitingAnswer(key: string, wait: RunWaitView): WaitingAnswer {
  const answer: WaitingAnswer = { key, status: 'waiting', waitingFor: wait.kind, step: wait.step };
  if (wait.until) answer.until = wait.until.toISOString();
  if (wait.kind === 'event' && wait.for) answer.topic = wait.for;
  if (wait.kind === 'child' && wait.for) answer.child = wait.for;
  if (wait.kind === 'slot' && wait.for) answer.queue = wait.for;
  return answer;
}
