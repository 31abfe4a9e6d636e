/**
 * Step limits as the workflow layer knows them. A step may name a limit on an
 * outside provider (`step('charge-card.v1', { limit })`); what a limit is and
 * how a step takes from it and gives back belongs to src/flow, which an
 * engine registers here (`RunDeps.limits`). An engine with no limits refuses
 * a step that names one.
 */
import type postgres from 'postgres';
import type { Queryable } from '../db/connect.js';
import type { KeyRef } from '../ledger/types.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { commitWaiting, type CommitExtra } from './commit.js';
import type { RunState } from './run-state.js';
import type { StepRow } from './sql/step-rows.js';
import type { StepTarget } from './steps.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** A limit as a step declares it (src/flow's defineLimit makes them). */
export interface StepLimitRef {
  readonly kind: 'stepkey.limit';
  readonly name: string;
}

/** What executing steps need of the limits an engine registers. */
export interface StepLimits {
  /** Commits `extra` with the step's acquire of its limit, or parks the run (throws RunStopped('parked')). */
  commitAcquiring(target: StepTarget, instance: string, extra?: CommitExtra): Promise<void>;
  /** The give-back to send with a commit of `rows`, when one of them records the step that holds a slot. */
  giveBackWith(state: RunState, q: Queryable, rows: readonly StepRow[]): Statement | undefined;
  /** After the commit that carried a give-back: the slot is back, and the waiters it marked due are woken. */
  afterGiveBack(state: RunState, statement: Statement | undefined): Promise<void>;
  /**
   * On Citus, where a transition leaves the run's slots to the coordinator: the give-back to
   * send after a transition that may move the run (its end, its failure, its park), in the same
   * transaction. A run still in progress keeps its slots. `afterGiveBack` follows its commit.
   */
  releaseWith(state: RunState, q: Queryable): Statement | undefined;
  /** After the commit that carried a release: the waiters it marked due are woken (the hold stays noted). */
  afterRelease(state: RunState, statement: Statement | undefined): Promise<void>;
  /** After an execution ends here: on Citus, the slots of a run moved under it (a cancel) given back. */
  afterExecution(state: RunState): Promise<void>;
  /** For the sweeper: on Citus, the slots left by runs that stopped executing, given back; returns the runs marked due. */
  sweep(onError: (error: unknown, context: string) => void): Promise<KeyRef[]>;
}

/**
 * Commits `extra` for a step's attempt — with the step's acquire of its
 * limit when it names one (or the run parks instead).
 */
export async function commitForAttempt(target: StepTarget, instance: string, extra: CommitExtra = {}): Promise<void> {
  const { state, declaration } = target;
  if (declaration.limit === undefined) {
    await commitWaiting(state, extra);
    return;
  }
  const limits = state.deps.limits;
  if (!limits) throw new StepkeyError('definition_error', `Step '${instance}' names limit '${declaration.limit}', and this engine registers no limits.`);
  await limits.commitAcquiring(target, instance, extra);
}
