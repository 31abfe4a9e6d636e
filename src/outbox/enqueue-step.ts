/**
 * The `enqueue` step kind: the graphile-worker job and the step's row commit
 * in one transaction (BEGIN; add_job; INSERT step row fenced by the run's
 * lease; COMMIT, all sent together) — with the run's start, when this is the
 * run's first write. A replayed step never enqueues
 * again: its row is found first. A transaction that rolls back — lease lost,
 * another holder first — leaves no job.
 */
import { Transaction } from '../db/transaction.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { faultPoint } from '../faults/fault-points.js';
import type { StepHandleExtension } from '../workflow/executor.js';
import type { StepUse } from '../workflow/handles.js';
import { insertStepRowsStatement, type StepRow } from '../workflow/sql/step-rows.js';
import { commitFailed, runStep } from '../workflow/steps.js';
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
        const rows = [...state.takePending(), row];
        // The run's start, if not yet committed, commits with the job.
        let transaction = state.takeOpening();
        try {
          transaction ??= await Transaction.begin(state.deps.sql);
        } catch (error) {
          throw translateDatabaseError(error, `enqueueing effect '${effect.name}'`);
        }
        try {
          await transaction.commit(
            addJobStatement(transaction.sql, effect, row.key, envelope),
            insertStepRowsStatement(transaction.sql, state.deps.clock, state.lease, rows),
          );
        } catch (error) {
          return commitFailed(state, row.key, error);
        }
        for (const written of rows) state.finished.set(written.name, written);
        faultPoint('outbox.after-enqueue', effect.name);
        return 'recorded';
      },
    );
  },
});
