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
import type { RunStatusName } from '../read/run-status.js';
import { assertActionBy, insertAuditStatement, type ActionBy } from './sql/audit.js';
import { makeRunDue } from '../lifecycle/resume.js';

export interface ResumeResult extends ActionResult {
  /** Not applied because another claimant held the run's key at that moment (a retry of its request resuming it, say). */
  busy: boolean;
  /** Not applied because the run's retention had ended. */
  expired: boolean;
}

export async function resumeRunAction(sql: Sql, clock: Clock, ref: KeyRef, by: ActionBy): Promise<ResumeResult> {
  assertRef(ref);
  assertActionBy(by);
  try {
    return await sql.begin(async (tx) => {
      const previous = await requireRun(tx, clock, ref);
      const { applied, busy, expired } = await makeRunDue(tx, clock, ref);
      const detail = busy ? { before: previous, busy } : { before: previous };
      await insertAuditStatement(tx, clock, by, { scope: ref.scope, action: 'resume', key: ref.key, applied, detail });
      return { applied, previous, busy, expired: !applied && expired };
    });
  } catch (error) {
    throw translateDatabaseError(error, 'resuming a run');
  }
}

/** Why a resume changed nothing, as the CLI and the dashboard say it. */
export function notResumedBecause(result: { previous: RunStatusName; busy: boolean; expired: boolean }): string {
  if (result.busy) return 'another claimant holds its key right now (a retry of its request taking it, say); try again in a moment';
  if (result.expired) return 'its record has expired: a new request under its key starts afresh';
  if (result.previous === 'failed') return 'it was failed a moment ago and has been taken since (a sweeper, or a retry of its request)';
  if (result.previous === 'stuck') {
    // A stuck run changes either way: another process took it over, or its stalled holder woke and failed it.
    return 'it was stuck a moment ago and has changed since: taken over (a sweeper, or a retry of its request), or failed by the process that held it — look again, and resume it if it is failed';
  }
  return `the run is ${result.previous}, not failed or stuck`;
}
