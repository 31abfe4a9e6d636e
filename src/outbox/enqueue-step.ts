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
        await commitWaiting(state, { rows: [row], statements: (q) => [addJobStatement(q, effect, row.key, envelope)] });
        faultPoint('outbox.after-enqueue', effect.name);
        return 'committed' as const;
      },
      { joinsDeferred: true },
    );
  },
});
