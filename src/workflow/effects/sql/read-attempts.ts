/** Reading a run's effect record, for engine.get and inspect: every attempt of every step, oldest first. */
import type { Queryable } from '../../../db/connect.js';
import type { KeyRef } from '../../../ledger/types.js';
import type { AttemptRecord } from '../attempts.js';

export async function readAttempts(q: Queryable, run: KeyRef): Promise<AttemptRecord[]> {
  return q<AttemptRecord[]>`
    select step, attempt, kind, lease_token::text as "leaseToken",
           (extract(epoch from started_at) * 1000)::float8 as "startedAtMs",
           (extract(epoch from ended_at) * 1000)::float8 as "endedAtMs",
           outcome, error, resolution, resolved_output as "resolvedOutput"
      from stepkey.step_attempts
     where scope = ${run.scope} and run_key = ${run.key}
     order by started_at, step, attempt`;
}
