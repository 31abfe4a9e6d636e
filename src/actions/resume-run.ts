/**
 * Resume: a failed (or stuck) run is made due (sql/make-due.ts) and any
 * process's sweeper continues it from its last finished step, under its own
 * workflow version. Nothing runs here. The change and its audit row commit
 * together.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import type { KeyRef } from '../ledger/types.js';
import { assertRef, requireRun, type ActionResult } from './cancel-run.js';
import { insertAuditStatement, type ActionBy } from './sql/audit.js';
import { makeRunDue } from './sql/make-due.js';

export async function resumeRunAction(sql: Sql, clock: Clock, ref: KeyRef, by: ActionBy): Promise<ActionResult> {
  assertRef(ref);
  try {
    return await sql.begin(async (tx) => {
      const previous = await requireRun(tx, clock, ref);
      const applied = await makeRunDue(tx, clock, ref);
      await insertAuditStatement(tx, clock, by, { scope: ref.scope, action: 'resume', key: ref.key, applied, detail: { before: previous } });
      return { applied, previous };
    });
  } catch (error) {
    throw translateDatabaseError(error, 'resuming a run');
  }
}
