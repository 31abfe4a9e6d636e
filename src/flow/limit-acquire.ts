/**
 * A limited step's acquire: before a `tx` or `call` step's attempt runs, it
 * takes a token and/or a slot from the step's limit, in a commit of its own
 * or riding the one the step makes anyway (a call's attempt start, an earlier
 * tx step still open, the run's start).
 *
 *   BEGIN; acquire (src/flow/sql/limits.ts; on Citus limits-distributed.ts)
 *     granted → what the step commits anyway (a call's attempt start)
 *     refused → park the run (wait_kind 'limit', wake at the next token's time,
 *               or when a slot is given back); COMMIT
 *
 * A parked run holds no lease and no connection; it continues — in any
 * process — when it is woken or due, and its step tries again. A finished
 * step replays without acquiring (it never gets here). Every attempt takes a
 * token (each may reach the provider); a slot is kept across the attempts of
 * one step and across a takeover of its run.
 */
import { faultPoint } from '../faults/fault-points.js';
import { commitWaiting, type CommitExtra } from '../workflow/commit.js';
import type { StepTarget } from '../workflow/steps.js';
import { parkStatement } from '../lifecycle/park.js';
import type { RunWait } from '../lifecycle/wait.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { limitPartitionOf, limitWaitFor } from './define-limit.js';
import { acquireStatement } from './sql/limits.js';
import { acquireDistributed } from './sql/limits-distributed.js';
import type { LimitRegistry } from './limit-registry.js';

/**
 * How long a run waiting for a slot waits before it tries again by itself: a
 * slot given back wakes a waiter at once, so this only bounds a wake-up that
 * never came (the waiter's process had no room, say, and no sweeper ran).
 */
export const slotBackstopMs = (leaseMs: number) => Math.max(4 * leaseMs, 10_000);

/** Commits `extra` with the step's acquire of its limit, or parks the run (and throws RunStopped('parked')). */
export async function commitAcquiring(registry: LimitRegistry, target: StepTarget, instance: string, extra: CommitExtra = {}): Promise<void> {
  const { state, declaration } = target;
  const limit = registry.require(declaration.limit!);
  const partition = limitPartitionOf(limit, state.input, { scope: state.lease.scope, key: state.lease.key, step: instance });
  if (!registry.isReady) {
    // The first acquire in this engine writes the limits' settings through the pool. What this run
    // holds open (its start, a tx step) commits first: runs waiting here with transactions open
    // could otherwise hold every connection the settings' write needs.
    await commitWaiting(state);
    await registry.ready();
  }
  let wait: RunWait | undefined;
  let slot = false;
  await commitWaiting(state, {}, async (q) => {
    const request = { lease: state.lease, limit: limit.name, partition, step: instance, backstopMs: slotBackstopMs(state.deps.leaseMs) };
    const row = registry.distributed
      ? await acquireDistributed(q, state.deps.clock, request)
      : (await acquireStatement(q, state.deps.clock, request))[0];
    if (!row?.known) throw new StepkeyError('definition_error', `Limit '${limit.name}' has no settings row; the engine writes it before the first acquire.`);
    if (row.granted) {
      slot = row.slot;
      return extra;
    }
    wait = { kind: 'limit', step: instance, for: limitWaitFor(limit.name, partition), untilMs: row.retry_at_ms };
    const parked = wait;
    return { statements: (tx) => [parkStatement(tx, state.deps.clock, state.lease, parked)] };
  });
  if (wait) {
    faultPoint('engine.after-park', declaration.name);
    throw state.control.park(wait);
  }
  if (slot) state.buffer.limitHold = { step: instance };
  faultPoint('engine.after-limit-acquire', declaration.name);
}
