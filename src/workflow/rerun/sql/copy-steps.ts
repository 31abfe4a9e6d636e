/**
 * The rerun's start: the steps the new run takes from the old run's record —
 * copied under the new run's keys (same names, outcomes and places in the
 * record), in the transaction that claims the new run and links it to the
 * old one (lifecycle/rerun.ts), so the rerun never exists without them.
 */
import type { Queryable } from '../../../db/connect.js';
import { type Clock, sqlNow } from '../../../db/clock.js';
import type { Lease } from '../../../ledger/types.js';

export interface CopiedStep {
  key: string;
  name: string;
  outcome: string;
  ok: boolean;
  attempts: number;
  seq: number | null;
}

export function copyStepsStatement(q: Queryable, clock: Clock, lease: Lease, steps: readonly CopiedStep[]) {
  const now = sqlNow(q, clock);
  return q`
    insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
    select ${lease.scope}, s.key, ${lease.key}, s.name, s.outcome, s.ok, s.attempts, s.seq, ${now}
      from json_to_recordset(${JSON.stringify(steps)}::json)
           as s(key text, name text, outcome text, ok boolean, attempts int, seq int)`;
}
