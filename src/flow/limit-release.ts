/**
 * Giving a limit slot back when its step is recorded: the commit that writes
 * the step's row (a tx step's, at the next step boundary; a call's, after the
 * call) also gives back the slot the step holds, fenced by the same lease,
 * and marks the limit's longest waiter due. Once it has committed, this
 * process wakes that waiter at once (the sweeper would otherwise take it
 * at its next sweep). A run that ends, fails, is cancelled or parks gives
 * its slots back through the ledger trigger of migration 0008.
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import type { RunState } from '../workflow/run-state.js';
import type { StepRow } from '../workflow/sql/step-rows.js';
import { giveBackStatement, type WokenRun } from './sql/limits.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** The give-back to send with a commit of `rows`, when one of them records the step that holds a slot. */
export function giveBackWith(state: RunState, q: Queryable, rows: readonly StepRow[]): Statement | undefined {
  const hold = state.buffer.limitHold;
  if (!hold || !rows.some((row) => row.name === hold.step)) return undefined;
  return giveBackStatement(q, state.lease, hold.step) as unknown as Statement;
}

/** After the commit that carried `statement`: the slot is back; wake the waiters it marked due. */
export async function afterGiveBack(state: RunState, statement: Statement | undefined): Promise<void> {
  if (!statement) return;
  state.buffer.limitHold = undefined;
  const woken = (await statement) as unknown as WokenRun[];
  for (const run of woken) state.deps.hooks.wake({ scope: run.scope, key: run.key });
}
