/**
 * Storing a run's trace context after its start: for a run started outside
 * any span, its first execution's own (see RunState.storesTrace), so that
 * every later execution of the run sits in that one trace.
 *
 * Guarantee: writes only the run's own row, only while the caller holds its
 * lease, and only when no context is stored yet — a later execution never
 * moves a run to another trace. It rides the execution's next commit.
 */
import type { Queryable } from '../../db/connect.js';
import type { Lease } from '../../ledger/types.js';

export function storeTraceContextStatement(q: Queryable, lease: Lease, context: string) {
  return q`
    update stepkey.ledger
       set trace_context = ${context}
     where scope = ${lease.scope} and key = ${lease.key}
       and lease_token = ${lease.token}::uuid and status = 'in_progress' and trace_context is null`;
}
