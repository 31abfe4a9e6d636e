/**
 * Fail: a run whose retries ran out (or that hit a bug, or a database error
 * retrying cannot fix) stops, resumable: no stored outcome, its last error
 * kept for diagnosis, claimable again with the same fingerprint (a resume
 * takes it over: take-over.ts, resume.ts). It gives back its queue slot —
 * keeping its entry, marked failed, so that a resume puts it back in line —
 * and its limit slots (holds.ts). It expires `retentionMs` after, like a
 * completed run.
 *
 * Guarantee: only by the holder of the run's lease (its token current, the
 * run in progress): a holder whose lease was taken over, or whose run was
 * cancelled, changes nothing (no row back).
 */
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { SqlText, StatementText } from '../db/statement-text.js';
import type { Lease } from '../ledger/types.js';
import { giveBackHolds, holdsRead } from './holds.js';

export function failRunStatement(
  q: Queryable,
  clock: Clock,
  lease: Lease,
  lastError: string,
  options: { retentionMs: number },
) {
  const b = new StatementText();
  const now = b.now(clock);
  b.sql`
    with moved as (
      update stepkey.ledger
         set status = 'failed',
             last_error = ${lastError},
             lease_token = null,
             locked_until = null,
             updated_at = ${now},
             expires_at = ${now} + ${options.retentionMs}::float8 * interval '1 millisecond'
       where scope = ${lease.scope} and key = ${lease.key}
         and lease_token = ${lease.token}::uuid and status = 'in_progress'
      returning scope, key
    )`;
  giveBackHolds(b, lease, 'fail');
  b.sql`
    select 1 as failed from moved where ${new SqlText(holdsRead)} >= 0`;
  return b.query(q);
}
