/**
 * Recording finished steps of a run.
 *
 * Guarantee: the rows are written only while the caller holds the run's
 * lease (its token is the run row's current one and the run is in progress);
 * otherwise stepkey.lease_held raises SKL01 and the whole step transaction —
 * business writes included — rolls back. The run row is share-locked until
 * COMMIT, so a takeover or a cancel lands either before the fence (and the
 * step rolls back) or after the commit (and the step counts). A plain INSERT, never ON CONFLICT DO
 * NOTHING: if another holder committed the same step first, the unique
 * violation (23505) rolls this transaction back too, and the step replays the
 * other holder's outcome. So a process whose lease was taken over can never
 * commit a step's business write a second time.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { Lease } from '../../ledger/types.js';

export interface StepRow {
  /** The derived key: childKey(rootKey, name). */
  key: string;
  /** The step's instance name: `name` or `name[id]`. */
  name: string;
  ok: boolean;
  body: string;
  attempts: number;
}

export function insertStepRowsStatement(q: Queryable, clock: Clock, run: Lease, rows: readonly StepRow[]) {
  const now = sqlNow(q, clock);
  return q`
    with fence as (
      select stepkey.lease_held(count(*)) as held
        from (select 1 from stepkey.ledger
               where scope = ${run.scope} and key = ${run.key}
                 and lease_token = ${run.token}::uuid and status = 'in_progress'
                 for share) as run
    )
    insert into stepkey.ledger
      (scope, key, kind, name, parent_key, fingerprint, status, outcome, outcome_ok, attempts,
       created_at, updated_at, completed_at)
    select ${run.scope}, s.key, 'step', s.name, ${run.key}, s.name, 'completed', s.body, s.ok,
           s.attempts, ${now}, ${now}, ${now}
      from fence,
           json_to_recordset(${JSON.stringify(rows)}::json) as s(key text, name text, body text, ok boolean, attempts int)
     where fence.held`;
}
