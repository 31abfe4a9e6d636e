/**
 * A workflow procedure or route on a queue (`workflow(w, { queue })`). The
 * request and its run are one ledger row, as for any workflow procedure, but
 * the run is put on the queue (engine.enqueue) instead of being started at
 * once:
 *
 *   a slot is free          the run starts here, at once; the answer is its
 *                           result (or 202 if it parks on a wait of its own)
 *   the queue is full       202 { key, status: 'waiting', waitingFor: 'slot',
 *                           step: 'queue:<name>', queue }, without the resolver
 *   a repeat, same key      while it waits: the same 202, Idempotent-Replayed;
 *                           running: 409 + Retry-After; once it has ended: its
 *                           result (or stored error) as for any replay
 *   same key, other input   422, and nothing is stored
 *
 * The 202's body holds only what stays true while the run waits (never its
 * position, which moves), so that a repeat answers it byte for byte; the
 * position is in `engine.get(ref).queue` and the router's `status`.
 *
 * The fingerprint is the procedure's (path + input): the queue is the
 * procedure's own, and a priority computed from the input follows it.
 */
import { isStepkeyError, StepkeyError } from '../errors/stepkey-error.js';
import type { Queue } from '../flow/define-queue.js';
import { slotWait } from '../lifecycle/slot-wait.js';
import type { Engine, RunHandle } from '../engine/engine.js';
import { decodeRunResult, REVIEW_RETRY_AFTER_MS } from '../workflow/outcomes.js';
import type { RunInfo } from '../read/run-info.js';
import { waitView } from '../lifecycle/wait.js';
import { internalFailure } from './internal-failure.js';
import { inProgress, mismatch, Refusal, type KeyUse } from './refusal.js';
import type { RunAnswer, RunCall } from './run-answer.js';
import { refusalOf } from './service-failure.js';

/**
 * The queue's name, checked when the procedure is defined: a queue made with
 * defineQueue() or a name, and — given the engine — one it registers.
 */
export function queueNameOf(option: unknown, where: string, engine?: Engine): string {
  const name = typeof option === 'string' ? option : (option as Queue | undefined)?.kind === 'stepkey.queue' ? (option as Queue).name : undefined;
  if (!name) {
    throw new StepkeyError('definition_error', `${where}: { queue } must be a queue made with defineQueue() or its name, got ${typeof option}.`);
  }
  if (engine) {
    try {
      engine.requireQueue(name);
    } catch (error) {
      throw new StepkeyError('definition_error', `${where}: ${(error as Error).message}`);
    }
  }
  return name;
}

export type QueuedCall = RunCall & { queue: { name: string; priority: number | undefined } };

/** Enqueues the call's run and says how to answer; refusals are thrown. */
export async function answerQueued(call: QueuedCall): Promise<RunAnswer> {
  const { engine, request, workflow } = call;
  let handle: RunHandle<unknown> & { queued: boolean };
  try {
    handle = await engine.enqueue(workflow, request, call.input as never, {
      queue: call.queue.name,
      ...(call.queue.priority === undefined ? {} : { priority: call.queue.priority }),
      fingerprint: call.fingerprints.fingerprint,
      legacyFingerprint: call.fingerprints.legacyFingerprint,
    });
  } catch (error) {
    throw enqueueFailure(error, call);
  }
  if (handle.started && handle.queued) {
    // The queue is full: the run waits for a slot. What a repeat will answer too.
    return { kind: 'accepted', wait: waitView(slotWait(call.queue.name)), replayed: false };
  }
  if (handle.started) return executedHere(call, handle);
  // The key already had its run: answer from what the ledger holds.
  let info: RunInfo | undefined;
  try {
    info = await engine.get(request);
  } catch (error) {
    throw failure(error, call);
  }
  return fromLedger(call, info);
}

/** The run started here, at once: its result, as for an unqueued workflow procedure. */
async function executedHere(call: QueuedCall, handle: RunHandle<unknown>): Promise<RunAnswer> {
  try {
    return { kind: 'completed', output: await handle.result(), replayed: false };
  } catch (error) {
    if (isStepkeyError(error, 'in_progress')) {
      // It parked on a wait of its own (a timer, an event, a child).
      const info = await call.engine.get(call.request).catch(() => undefined);
      if (info?.status === 'waiting' && info.wait) return { kind: 'accepted', wait: info.wait, replayed: false };
      throw inProgress(1_000);
    }
    if (isStepkeyError(error, 'run_failed') && error.details.resumable !== true && error.details.error) {
      return { kind: 'errored', error: error.details.error as never, replayed: false };
    }
    if (isStepkeyError(error, 'run_cancelled')) {
      return { kind: 'cancelled', reason: (error.details.reason as { message?: string } | undefined)?.message, replayed: false };
    }
    throw failure(error, call);
  }
}

function fromLedger(call: QueuedCall, info: RunInfo | undefined): RunAnswer {
  // No row yet: another call's enqueue of this key has not committed.
  if (!info) throw inProgress(1_000);
  switch (info.status) {
    case 'completed':
      try {
        return {
          kind: 'completed',
          output: decodeRunResult(call.engine.registry, { state: 'completed', body: info.output ?? '', workflow: info.workflow, version: info.version }),
          replayed: true,
        };
      } catch (error) {
        throw failure(error, call);
      }
    case 'errored':
      return { kind: 'errored', error: info.error!, replayed: true };
    case 'cancelled':
    case 'deadline_exceeded':
      return { kind: 'cancelled', reason: info.error?.message, replayed: true };
    case 'waiting':
      if (info.wait) return { kind: 'accepted', wait: info.wait, replayed: true };
      throw inProgress(1_000);
    case 'needs_review':
      throw inProgress(REVIEW_RETRY_AFTER_MS);
    case 'running':
    case 'failed': {
      // Running somewhere (a failed run this call resumed included): the retry gets its answer.
      const leftMs = info.leaseExpiresAt ? info.leaseExpiresAt.getTime() - Date.now() : 1_000;
      throw inProgress(Math.min(Math.max(leftMs, 1_000), 10_000));
    }
  }
}

function failure(error: unknown, call: QueuedCall): Refusal {
  return isStepkeyError(error) ? refusalOf(error, call.report) : internalFailure(error, call.report);
}

/** A mismatch is 422; a queue the engine does not register is the server's bug, said plainly (500). */
function enqueueFailure(error: unknown, call: QueuedCall): Refusal {
  if (isStepkeyError(error, 'mismatch')) {
    const existing = error.details.existing as Partial<KeyUse> | undefined;
    return mismatch({ kind: existing?.kind ?? 'run', name: existing?.name ?? null }, { kind: 'run', name: call.workflow.name }, call.noun);
  }
  if (isStepkeyError(error, 'invalid_options')) {
    // The procedure's own options (its queue, its priority), not the caller's input.
    const definition = new StepkeyError('definition_error', `${call.noun === 'route' ? 'Route' : 'Procedure'} ${call.name}: ${error.message}`, { cause: error });
    return new Refusal(500, definition.message, { cause: definition });
  }
  return failure(error, call);
}
