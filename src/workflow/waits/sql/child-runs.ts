/**
 * Child runs: a root row of their own (kind 'run'), keyed by the parent
 * step's derived key in the parent's scope, linked to the parent by
 * `parent_run` (not `parent_key`, which means "step of").
 *
 * Guarantees:
 * - A child is started once: its claim (lifecycle/child-claim.ts) is a plain
 *   INSERT in the transaction that records the parent's step — the parent
 *   waiting for it, or the ref it returned.
 * - A child's end wakes its parent without a lost wake-up (lifecycle/wake.ts):
 *   the ending transaction locks the parent's row before it marks the parent
 *   due, and only if the parent is parked on this child; a parent that
 *   decides to wait locks its own row before it reads the child.
 */
import type { Queryable } from '../../../db/connect.js';

export interface ChildRow {
  status: string;
  outcome: string | null;
  outcome_ok: boolean | null;
  last_error: string | null;
  name: string;
  version: number | null;
}

export function readChildStatement(q: Queryable, scope: string, key: string) {
  return q<ChildRow[]>`
    select status, outcome, outcome_ok, last_error, name, version
      from stepkey.ledger
     where scope = ${scope} and key = ${key} and kind = 'run'`;
}
