/**
 * A wait step, whatever it waits for. In one transaction — with whatever the
 * run has waiting to commit (its start, its last tx step, recorded values):
 *
 *   lock the run's row (fenced by its lease) and read stepkey's now
 *   decide, from fresh reads: the wait is over → its outcome is the step's
 *   record; it is not → the run parks (its wait written, its lease released)
 *   COMMIT
 *
 * A wait already settled by what was loaded with the run (a timer due by
 * the time the run was loaded) takes no lock and commits nothing of its
 * own: its record joins the run's next commit, as recorded values do. Until
 * then the run's row keeps the wait, so an execution that dies first is
 * resumed into the same wait, and settles it the same way.
 *
 * A run that parks ends its execution here (workflow code unwinds through
 * RunStopped('parked')); it continues when due, in whichever process sweeps
 * or is woken, and the waiting step finds the wait it recorded. A finished
 * wait replays its recorded outcome and never waits again.
 */
import type postgres from 'postgres';
import type { Queryable } from '../../db/connect.js';
import type { TxSql } from '../../db/transaction.js';
import { faultPoint } from '../../faults/fault-points.js';
import { stepSpan, waitEnding, type WaitStepKind } from '../../telemetry/spans.js';
import { inSpan } from '../../telemetry/tracing.js';
import { commitWaiting } from '../commit.js';
import type { FinishedStep } from '../sql/load-run.js';
import { enterStep, type EnteredStep, type StepTarget } from '../steps.js';
import { lockRunStatement, parkStatement } from '../../lifecycle/park.js';
import type { RunWait } from '../../lifecycle/wait.js';

type Statement = postgres.PendingQuery<postgres.Row[]>;

/** What a wait decides once it holds its run's row. */
export interface WaitDecision {
  /** The wait is over: this is the step's recorded outcome. */
  finish?: { ok: boolean; body: string };
  /** It is not: the run parks with this wait. */
  park?: RunWait;
  /** Statements that commit with it, before the park (a child run's claim). */
  statements?: (q: Queryable) => Statement[];
  /** After the commit (executing the child just claimed). */
  after?: () => void;
}

export type Decide = (entered: EnteredStep, q: TxSql, nowMs: number) => Promise<WaitDecision>;

/** The outcome of a wait that needs no lock to decide (see above), or undefined. */
export type Settled = (entered: EnteredStep) => WaitDecision['finish'];

/**
 * Runs a wait step: `decide` under the run's row lock; `decode` turns a
 * recorded outcome into the step's value. Each turn that reaches the
 * decision is a span (a replay of a recorded outcome is not); a child run
 * started in it is that span's child.
 */
export function runWait(
  target: StepTarget,
  kind: WaitStepKind,
  decide: Decide,
  decode: (finished: FinishedStep, instance: string) => unknown,
  settled?: Settled,
): Promise<unknown> {
  const { state, declaration } = target;
  return enterStep(
    target,
    async (entered) => {
      state.control.throwIfStopped();
      faultPoint('engine.before-step', declaration.name);
      // Settled by what was loaded: recorded with the run's next commit, not here.
      let joinsNextCommit = false;
      const span = () => stepSpan({ scope: state.lease.scope, run: state.lease.key, step: entered.instance, kind, key: entered.key, attempt: 1 });
      const decision = await inSpan(
        span,
        async () => {
          const over = settled?.(entered);
          if (over) {
            state.recordPending({ key: entered.key, name: entered.instance, ok: over.ok, body: over.body, attempts: 1 });
            joinsNextCommit = true;
            return { finish: over };
          }
          let decided: WaitDecision = {};
          await commitWaiting(state, {}, async (q) => {
            const [lock] = await lockRunStatement(q, state.deps.clock, state.lease);
            decided = await decide(entered, q, lock!.now_ms);
            const { finish, park, statements } = decided;
            return {
              rows: finish ? [{ key: entered.key, name: entered.instance, ok: finish.ok, body: finish.body, attempts: 1 }] : [],
              statements: (tx) => [...(statements?.(tx) ?? []), ...(park ? [parkStatement(tx, state.deps.clock, state.lease, park)] : [])],
            };
          });
          decided.after?.();
          return decided;
        },
        waitEnding,
      );
      if (decision.park) {
        faultPoint('engine.after-park', declaration.name);
        throw state.control.park(decision.park);
      }
      if (!joinsNextCommit) faultPoint('engine.after-step-commit', declaration.name);
      return decode(state.record.finished.get(entered.instance)!, entered.instance);
    },
    decode,
  );
}
