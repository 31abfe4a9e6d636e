/**
 * Forgetting what has expired: ledger keys (with their steps and run
 * metadata), inbox rows, stopped worker pools. In small batches, so that a
 * large backlog never holds long locks.
 */
import type { Sql } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { purgeExpiredRows } from '../ledger/sql/purge.js';
import { purgeInbox } from '../outbox/sql/inbox.js';
import { purgePools } from './pool-liveness.js';

export interface PurgeResult {
  keys: number;
  steps: number;
  inbox: number;
  pools: number;
}

export async function purgeExpired(
  sql: Sql,
  options: { clock?: Clock; batchSize?: number; maxBatches?: number } = {},
): Promise<PurgeResult> {
  const clock = options.clock ?? systemClock;
  const batchSize = options.batchSize ?? 500;
  const maxBatches = options.maxBatches ?? 100;
  const result: PurgeResult = { keys: 0, steps: 0, inbox: 0, pools: 0 };
  for (let batch = 0; batch < maxBatches; batch += 1) {
    const done = await purgeExpiredRows(sql, clock, batchSize);
    result.keys += done.roots;
    result.steps += done.children;
    if (done.roots < batchSize) break;
  }
  for (let batch = 0; batch < maxBatches; batch += 1) {
    const done = await purgeInbox(sql, clock, batchSize);
    result.inbox += done;
    if (done < batchSize) break;
  }
  result.pools = await purgePools(sql, clock);
  return result;
}
