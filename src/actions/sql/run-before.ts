/** A run's row before an action changes it: its kind and its status as operators see it. */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';
import { statusCaseSql, type RunStatusName } from '../../read/run-status.js';
import { SqlText } from '../../read/sql/sql-text.js';

export interface RunBefore {
  kind: string;
  /** The run's status as operators see it (null for a key that is not a run). */
  status: RunStatusName | null;
}

export async function runBefore(q: Queryable, clock: Clock, ref: KeyRef): Promise<RunBefore | undefined> {
  const text = new SqlText(clock);
  const rows = await q.unsafe<RunBefore[]>(
    `select l.kind, case when l.kind = 'run' then ${statusCaseSql(text.now())} end as status
       from stepkey.ledger l where l.scope = ${text.param(ref.scope)} and l.key = ${text.param(ref.key)}`,
    text.values as never[],
  );
  return rows[0];
}
