/**
 * Resolve, as an operator's action: a run that needs review is resolved
 * (workflow/effects/resolve.ts: the operator's output, checked against the
 * step's schema, or a call again) and made due; its audit row — who, the
 * step, the answer, the unknown attempts it settled — commits with it. A
 * resolution refused (not in review, a bad output) changes nothing and
 * records nothing.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';
import { resolveRun, type Resolution, type Resolved } from '../workflow/effects/resolve.js';
import type { WorkflowRegistry } from '../workflow/registry.js';
import { assertRef } from './cancel-run.js';
import { assertActionBy, insertAuditStatement, type ActionBy } from './sql/audit.js';

export async function resolveRunAction(
  sql: Sql,
  clock: Clock,
  registry: WorkflowRegistry,
  ref: KeyRef,
  resolution: Resolution,
  by: ActionBy,
): Promise<Resolved> {
  assertRef(ref);
  assertActionBy(by);
  return resolveRun(sql, clock, registry, ref, resolution, (tx, resolved) =>
    insertAuditStatement(tx, clock, by, {
      scope: ref.scope,
      action: 'resolve',
      key: ref.key,
      applied: true,
      detail: {
        step: resolved.step,
        resolution: resolved.output === null ? 'retried' : 'resolved',
        ...(resolved.output === null ? {} : { output: resolved.output }),
        attempts: resolved.attempts,
        before: 'needs_review',
      },
    }),
  );
}
