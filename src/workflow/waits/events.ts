/**
 * `waitForEvent(topic, { timeoutMs })`: the oldest event on the topic not yet
 * consumed — one sent before the run got here is waiting for it — consumed
 * once, in the transaction that records it as the step's outcome. With a
 * timeout, the deadline is computed once and recorded; whichever of the
 * event and the deadline is recorded first is the outcome, on every replay.
 */
import { StepkeyError } from '../../errors/stepkey-error.js';
import type { Workflow } from '../define.js';
import type { StepUse } from '../handles.js';
import type { FinishedStep } from '../sql/load-run.js';
import type { StepTarget } from '../steps.js';
import { decodeValue } from '../values.js';
import { runWait } from './settle.js';
import { invalidInput } from './timer.js';
import { consumeStatement } from './sql/mailbox.js';

export interface WaitForEventOptions extends StepUse {
  timeoutMs?: number;
}

export function waitForEventStep(target: StepTarget, workflow: Workflow, topic: string, options: WaitForEventOptions = {}): Promise<unknown> {
  const { state, declaration } = target;
  const where = `Step '${declaration.name}'`;
  const schema = typeof topic === 'string' ? workflow.events[topic] : undefined;
  if (!schema) {
    const declared = Object.keys(workflow.events);
    return Promise.reject(
      new StepkeyError(
        'definition_error',
        `${where}: waitForEvent(${JSON.stringify(topic)}) waits for an event workflow '${workflow.name}' does not declare ` +
          `(declared: ${declared.length ? declared.join(', ') : 'none'}); declare it in defineWorkflow({ events: { ${String(topic)}: schema } }).`,
      ),
    );
  }
  const { timeoutMs } = options;
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0)) {
    return Promise.reject(invalidInput(`${where}: waitForEvent's timeoutMs must be a finite number ≥ 0, got ${String(timeoutMs)}.`));
  }
  const decode = (finished: FinishedStep, instance: string) => {
    const recorded = JSON.parse(finished.body) as { type: 'event' | 'timeout'; key?: string; payload?: unknown };
    if (recorded.type === 'timeout') return { type: 'timeout' };
    const payload = decodeValue(JSON.stringify(recorded.payload), schema, `The '${topic}' event received by step '${instance}'`);
    return { type: 'event', payload, key: recorded.key };
  };
  return runWait(
    { ...target, use: options.id === undefined ? target.use : { id: options.id } },
    'waitForEvent',
    async ({ instance, key }, q, nowMs) => {
      const [message] = await consumeStatement(q, state.deps.clock, state.lease.scope, state.lease.key, topic, key);
      if (message) {
        return { finish: { ok: true, body: `{"type":"event","key":${JSON.stringify(message.sender_key)},"payload":${message.payload}}` } };
      }
      const recorded = state.record.recordedWait(instance, 'event');
      const deadline = recorded ? recorded.untilMs : timeoutMs === undefined ? null : nowMs + timeoutMs;
      if (deadline !== null && deadline <= nowMs) return { finish: { ok: true, body: '{"type":"timeout"}' } };
      return { park: { kind: 'event', step: instance, for: topic, untilMs: deadline } };
    },
    decode,
  );
}
