/** The wait methods of every step handle: sleep, sleepUntil, waitForEvent, child, startChild. */
import type { Workflow } from '../define.js';
import type { StepHandleExtension } from '../executor.js';
import type { StepUse } from '../handles.js';
import { childStep, startChildStep } from './children.js';
import type { ChildOptions } from './queued-child.js';
import { waitForEventStep, type WaitForEventOptions } from './events.js';
import { sleepStep, sleepUntilStep } from './timer.js';

export const waitStepKinds: StepHandleExtension = (state, declaration, workflow) => {
  const target = { state, declaration, use: undefined };
  return {
    sleep: (ms: number, use?: StepUse) => sleepStep(target, ms, use),
    sleepUntil: (date: Date, use?: StepUse) => sleepUntilStep(target, date, use),
    waitForEvent: (topic: string, options?: WaitForEventOptions) => waitForEventStep(target, workflow, topic, options),
    child: (child: Workflow, input: unknown, options?: ChildOptions) => childStep(target, child, input, options),
    startChild: (child: Workflow, input: unknown, options?: ChildOptions) => startChildStep(target, child, input, options),
  };
};
