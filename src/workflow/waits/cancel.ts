/**
 * Cancelling a run and the children it waits on, in one transaction; a
 * cancelled child that a parent waits on wakes the parent. A deadlock with a
 * child that is finishing at the same moment (it locks itself, then its
 * parent; a cancel locks down the chain) is retried.
 */
import type { Sql } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { inTransaction, type TxSql } from '../../db/transaction.js';
import { isTransientConflict } from '../../errors/pg-errors.js';
import type { KeyRef } from '../../ledger/types.js';
import { cancelRunsStatement, lockChainStatement } from '../../lifecycle/cancel.js';
import { lockParentStatement, wakeParentStatement } from './sql/child-runs.js';

export async function cancelRuns(
  sql: Sql,
  clock: Clock,
  ref: KeyRef,
  outcome: string,
  retentionMs: number,
  /** More writes that commit with the cancel (the operator action's audit row). */
  also?: (tx: TxSql, cancelled: { keys: string[]; parentRun: string | null }) => Promise<unknown>,
): Promise<{ keys: string[]; parentRun: string | null }> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await inTransaction(sql, async (tx) => {
        // Down the chain, so that a park committing meanwhile is seen (see sql/cancel-run.ts).
        for (let level = [ref.key], depth = 0; level.length > 0 && depth <= 64; depth += 1) {
          level = await lockChainStatement(tx, ref.scope, level);
        }
        const rows = await cancelRunsStatement(tx, clock, ref, outcome, retentionMs);
        const parentRun = rows.find((row) => row.key === ref.key)?.parent_run ?? null;
        if (parentRun) {
          await lockParentStatement(tx, ref.scope, parentRun);
          await wakeParentStatement(tx, clock, ref.scope, parentRun, ref.key);
        }
        const cancelled = { keys: rows.map((row) => row.key), parentRun };
        await also?.(tx, cancelled);
        return cancelled;
      });
    } catch (error) {
      if (!isTransientConflict(error) || attempt >= 3) throw error;
    }
  }
}
