/**
 * The `enqueue` step kind: the graphile-worker job and the step's row commit
 * in one transaction (add_job; INSERT step row fenced by the run's lease;
 * COMMIT, sent together) — with whatever was waiting to commit: the run's
 * start, the last tx step. A replayed step never enqueues
 * again: its row is found first. A transaction that rolls back — lease lost,
 * another holder first — leaves no job.
 */
import { faultPoint } from '../faults/fault-points.js';
import { commitWaiting } from '../workflow/commit.js';
import type { StepHandleExtension } from '../workflow/executor.js';
import type { StepUse } from '../workflow/handles.js';
import type { StepRow } from '../workflow/sql/step-rows.js';
import { runStep } from '../workflow/steps.js';
import type { Effect } from './effect.js';
import { envelopeText } from './message.js';
import { addJobStatement } from './sql/add-job.js';
import { nextAttemptNumber } from '../workflow/effects/attempts.js';
import { inSpan } from '../telemetry/tracing.js';
import { enqueueSpan } from '../telemetry/spans.js';

export const enqueueStep: StepHandleExtension = (state, declaration) => ({
  enqueue(effect: Effect, payload: unknown, use?: StepUse): Promise<unknown> {
    let envelope = '';
    return runStep(
      { state, declaration, use },
      async (key) => {
        envelope = envelopeText(effect, key, state.lease.scope, payload);
        return { ok: true, body: JSON.stringify({ key }) };
      },
      async (row: StepRow) => {
        // With everything waiting — the last tx step, the run's start — or on its own.
        // Its effect record: one attempt, started and ended by the commit that adds the job.
        const attempt = nextAttemptNumber(state.record.attempts.get(row.name) ?? []);
        const span = () => enqueueSpan({ scope: state.lease.scope, key: row.key, effect: effect.name, run: state.lease.key, step: row.name, attempt });
        await inSpan(span, () =>
          commitWaiting(state, {
            rows: [row],
            attempts: [{ write: 'once', step: row.name, attempt, kind: 'enqueue' }],
            statements: (q) => [addJobStatement(q, effect, row.key, envelope)],
          }),
        );
        faultPoint('outbox.after-enqueue', effect.name);
        return 'committed' as const;
      },
      { joinsDeferred: true, kind: 'enqueue' },
    );
  },
});
