/**
 * Rerun, as an operator's action: a new run that takes the steps before
 * `from` from the old run's record and executes the rest
 * (workflow/rerun/rerun.ts). Its audit row, on the old run — who, the step,
 * the new run's key, the steps taken and executed again, those forced —
 * commits with the new run's start; the same rerun asked for again records
 * `applied: false`. A rerun refused changes nothing and records nothing.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { startRerun, type RerunOptions, type StartedRerun } from '../workflow/rerun/rerun.js';
import type { WorkflowRegistry } from '../workflow/registry.js';
import { assertRef } from './cancel-run.js';
import { assertActionBy, insertAuditStatement, type ActionBy } from './sql/audit.js';

export async function rerunAction(
  sql: Sql,
  clock: Clock,
  ref: KeyRef,
  options: RerunOptions,
  settings: { leaseMs: number; dueNow: boolean; registry?: WorkflowRegistry },
  by: ActionBy,
): Promise<StartedRerun> {
  assertRef(ref);
  assertActionBy(by);
  return startRerun(sql, clock, ref, options, settings, (tx, started) => {
    const { plan } = started;
    return insertAuditStatement(tx, clock, by, {
      scope: ref.scope,
      action: 'rerun',
      key: ref.key,
      applied: started.lease !== undefined,
      detail: {
        from: options.from,
        rerunKey: started.ref.key,
        taken: plan.taken,
        again: plan.again,
        ...(plan.confirmed.length ? { forced: plan.confirmed.map((effect) => effect.step) } : {}),
        before: plan.status,
      },
    });
  });
}
