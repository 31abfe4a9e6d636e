/**
 * Rerun: a run just claimed (claim.ts) as the rerun of another is linked to
 * it — the run it reruns and the step it executes again from — in the
 * transaction that claims it and copies the steps it takes from the old
 * run's record (workflow/rerun). With `dueNow` the new run is left to a
 * sweeper instead of its claimant: its lease ends now and its executions go
 * back to 0, so that the next sweep of any worker takes it (the CLI starts
 * reruns without executing them).
 *
 * Guarantee: fenced by the claimant's lease — only while the lease token is
 * the row's and the run is in progress (running). The two forms are two
 * statements, chosen on the client: no function of the database's clock is
 * evaluated inside a CASE of the UPDATE (Citus refuses one), and the form
 * that keeps the lease touches neither the lease nor the executions.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { Lease } from '../ledger/types.js';

export function linkRerunStatement(q: Queryable, clock: Clock, lease: Lease, of: string, from: string, dueNow: boolean) {
  if (!dueNow) {
    return q`
      update stepkey.ledger
         set rerun_of = ${of}, rerun_from = ${from}
       where scope = ${lease.scope} and key = ${lease.key} and lease_token = ${lease.token}::uuid and status = 'in_progress'`;
  }
  const now = sqlNow(q, clock);
  return q`
    update stepkey.ledger
       set rerun_of = ${of}, rerun_from = ${from}, locked_until = ${now}, attempts = 0
     where scope = ${lease.scope} and key = ${lease.key} and lease_token = ${lease.token}::uuid and status = 'in_progress'`;
}
