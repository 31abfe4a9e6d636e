/**
 * Cancelling a run: it is finished as cancelled, with the reason stored as its
 * outcome. Guarantee: only a run that is in progress or failed is cancelled;
 * the lease token is cleared, so the process running it fails its next fenced
 * write and stops at that step boundary — a step in flight either committed
 * before the cancel or not at all.
 */
import type { Queryable } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import type { KeyRef } from '../../ledger/types.js';

export async function cancelRun(
  q: Queryable,
  clock: Clock,
  ref: KeyRef,
  outcome: string,
  retentionMs: number,
): Promise<boolean> {
  const now = sqlNow(q, clock);
  const rows = await q`
    update stepkey.ledger
       set status = 'cancelled',
           outcome = ${outcome},
           outcome_ok = false,
           lease_token = null,
           locked_until = null,
           completed_at = ${now},
           updated_at = ${now},
           expires_at = ${now} + ${retentionMs}::float8 * interval '1 millisecond'
     where scope = ${ref.scope} and key = ${ref.key} and kind = 'run'
       and status in ('in_progress', 'failed')
    returning 1`;
  return rows.length === 1;
}
