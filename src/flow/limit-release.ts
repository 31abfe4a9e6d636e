/**
 * Giving a limit slot back when its step is recorded: the commit that writes
 * the step's row (a tx step's, at the next step boundary; a call's, after the
 * call) also gives back the slot the step holds, fenced by the same lease,
 * and marks the limit's longest waiter due. Once it has committed, this
 * process wakes that waiter at once (the sweeper would otherwise take it
 * at its next sweep). A run that ends, fails, is cancelled or parks gives
 * its slots back in the transition that moves it (lifecycle/holds.ts).
 *
 * On Citus the transition runs on the scope's node and leaves the slots:
 * the coordinator gives them back in the transition's transaction
 * (`releaseWith`), or, for a run moved under its process (a cancel), when
 * the execution ends; a sweep gives back what a killed process left.
 */
import type postgres from 'postgres';
import type { Queryable, Sql } from '../db/connect.js';
import type { KeyRef } from '../ledger/types.js';
import type { RunState } from '../workflow/run-state.js';
import type { StepRow } from '../workflow/sql/step-rows.js';
import { giveBackStatement, type WokenRun } from './sql/limits.js';
import { giveBackDistributedStatement, slotsLeftStatement } from './sql/limits-distributed.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** Runs whose left slots one sweep gives back at most. */
const LEFT_PER_SWEEP = 100;

/** The give-back to send with a commit of `rows`, when one of them records the step that holds a slot. */
export function giveBackWith(state: RunState, q: Queryable, rows: readonly StepRow[], distributed: boolean): Statement | undefined {
  const hold = state.buffer.limitHold;
  if (!hold || !rows.some((row) => row.name === hold.step)) return undefined;
  const statement = distributed
    ? giveBackDistributedStatement(q, state.lease, { step: hold.step, token: state.lease.token })
    : giveBackStatement(q, state.lease, hold.step);
  return statement as unknown as Statement;
}

/** On Citus, sent after a transition: every slot of the run given back if the transition moved it. */
export function releaseWith(state: RunState, q: Queryable, distributed: boolean): Statement | undefined {
  if (!distributed || !state.buffer.limitHold) return undefined;
  return giveBackDistributedStatement(q, { scope: state.lease.scope, key: state.lease.key }) as unknown as Statement;
}

/** After the commit that carried `statement`: the slot is back; wake the waiters it marked due. */
export async function afterGiveBack(state: RunState, statement: Statement | undefined): Promise<void> {
  if (!statement) return;
  state.buffer.limitHold = undefined;
  await wakeMarked(state, statement);
}

/**
 * After the commit that carried a release: wake the waiters it marked due. The hold stays noted:
 * a run still in progress kept its slot (a commit of a wait beside a limited step, say), and its
 * step's record gives it back; a run that moved gave everything back already (a second give-back
 * when its execution ends finds nothing).
 */
export async function afterRelease(state: RunState, statement: Statement | undefined): Promise<void> {
  if (statement) await wakeMarked(state, statement);
}

async function wakeMarked(state: RunState, statement: Statement): Promise<void> {
  const woken = (await statement) as unknown as WokenRun[];
  for (const run of woken) state.deps.hooks.wake({ scope: run.scope, key: run.key });
}

/** On Citus, after an execution that still held a slot: given back if the run was moved under it. */
export async function afterExecution(state: RunState, distributed: boolean): Promise<void> {
  if (!distributed || !state.buffer.limitHold) return;
  try {
    await afterGiveBack(state, giveBackDistributedStatement(state.deps.sql, { scope: state.lease.scope, key: state.lease.key }) as unknown as Statement);
  } catch (error) {
    // A sweep gives the slots back instead.
    state.deps.log.warn({ event: 'limit.give_back_failed', scope: state.lease.scope, run: state.lease.key, error: String(error) }, 'a limit slot is left for a sweep to give back');
  }
}

/** On Citus, for a sweep: the slots of runs that are not executing, given back; returns the runs marked due. */
export async function giveBackLeft(sql: Sql, onError: (error: unknown, run: KeyRef) => void): Promise<KeyRef[]> {
  const left = await slotsLeftStatement(sql, LEFT_PER_SWEEP);
  const woken: KeyRef[] = [];
  for (const run of left) {
    try {
      for (const due of await giveBackDistributedStatement(sql, run)) woken.push({ scope: due.scope, key: due.key });
    } catch (error) {
      // One run's give-back failing (a node lost, a deadlock's victim) holds up no other's.
      onError(error, run);
    }
  }
  return woken;
}
