/**
 * A workflow procedure on a queue: `idempotency.workflow(w, { queue })`.
 * The request and its run are one ledger row, as for any workflow
 * procedure, but the run is put on the queue (engine.enqueue) instead of
 * being started at once:
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
import { TRPCError } from '@trpc/server';
import { isStepkeyError, StepkeyError } from '../errors/stepkey-error.js';
import type { Queue } from '../flow/define-queue.js';
import { slotWait } from '../lifecycle/slot-wait.js';
import type { KeyRef } from '../ledger/types.js';
import type { Engine, RunHandle } from '../engine/engine.js';
import type { Workflow } from '../workflow/define.js';
import { decodeRunResult, REVIEW_RETRY_AFTER_MS } from '../workflow/outcomes.js';
import type { RunInfo } from '../read/run-info.js';
import { waitView, type RunWaitView } from '../lifecycle/wait.js';
import { trpcErrorFromStored } from './error-policy.js';
import { internalServerError, type ErrorReport } from './internal-error.js';
import { inProgress, markReplayed, mismatch, type KeyUse } from './keyed-request.js';
import type { RequestAccess } from './request-access.js';
import { toServiceError } from './service-error.js';

export interface QueueProcedureOptions<Ctx, Input> {
  /** The queue the runs of this procedure wait on (registered with the engine: createEngine({ queues })). */
  queue: Queue<any> | string;
  /** Whole number from -1000 to 1000 (default 0), or one computed from the workflow's input and ctx. */
  priority?: number | ((input: Input, ctx: Ctx) => number);
}

/** What the queued path answers: the run's result, a 202 body, or an error thrown. */
export type QueuedAnswer =
  | { kind: 'completed'; output: unknown; replayed: boolean }
  | { kind: 'accepted'; wait: RunWaitView; replayed: boolean };

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

export interface QueuedCall<Ctx> {
  engine: Engine;
  access: RequestAccess<Ctx>;
  ctx: Ctx;
  path: string;
  request: KeyRef;
  workflow: Workflow;
  input: unknown;
  queue: string;
  priority: number | undefined;
  fingerprints: { fingerprint: string; legacyFingerprint: () => string };
  report: ErrorReport;
}

/** Enqueues the call's run and says how to answer; failures are thrown as TRPCErrors. */
export async function answerQueued<Ctx>(call: QueuedCall<Ctx>): Promise<QueuedAnswer> {
  const { engine, access, ctx, request, workflow } = call;
  let handle: RunHandle<unknown> & { queued: boolean };
  try {
    handle = await engine.enqueue(workflow, request, call.input as never, {
      queue: call.queue,
      ...(call.priority === undefined ? {} : { priority: call.priority }),
      fingerprint: call.fingerprints.fingerprint,
      legacyFingerprint: call.fingerprints.legacyFingerprint,
    });
  } catch (error) {
    throw enqueueFailure(error, call);
  }
  if (handle.started && handle.queued) {
    // The queue is full: the run waits for a slot. What a repeat will answer too.
    return { kind: 'accepted', wait: waitView(slotWait(call.queue)), replayed: false };
  }
  if (handle.started) return executedHere(call, handle);
  // The key already had its run: answer from what the ledger holds.
  let info: RunInfo | undefined;
  try {
    info = await engine.get(request);
  } catch (error) {
    throw isStepkeyError(error) ? toServiceError(error, access, ctx, call.report) : internalServerError(error, call.report);
  }
  return fromLedger(call, info);
}

/** The run started here, at once: its result, as for an unqueued workflow procedure. */
async function executedHere<Ctx>(call: QueuedCall<Ctx>, handle: RunHandle<unknown>): Promise<QueuedAnswer> {
  try {
    return { kind: 'completed', output: await handle.result(), replayed: false };
  } catch (error) {
    if (isStepkeyError(error, 'in_progress')) {
      // It parked on a wait of its own (a timer, an event, a child).
      const info = await call.engine.get(call.request).catch(() => undefined);
      if (info?.status === 'waiting' && info.wait) return { kind: 'accepted', wait: info.wait, replayed: false };
      throw inProgress(call.access, call.ctx, 1_000);
    }
    if (isStepkeyError(error, 'run_failed') && error.details.resumable !== true && error.details.error) {
      throw trpcErrorFromStored(error.details.error as never);
    }
    if (isStepkeyError(error, 'run_cancelled')) throw cancelledError((error.details.reason as { message?: string } | undefined)?.message);
    throw isStepkeyError(error) ? toServiceError(error, call.access, call.ctx, call.report) : internalServerError(error, call.report);
  }
}

function fromLedger<Ctx>(call: QueuedCall<Ctx>, info: RunInfo | undefined): QueuedAnswer {
  const { access, ctx } = call;
  // No row yet: another call's enqueue of this key has not committed.
  if (!info) throw inProgress(access, ctx, 1_000);
  switch (info.status) {
    case 'completed':
      try {
        return {
          kind: 'completed',
          output: decodeRunResult(call.engine.registry, { state: 'completed', body: info.output ?? '', workflow: info.workflow, version: info.version }),
          replayed: true,
        };
      } catch (error) {
        throw isStepkeyError(error) ? toServiceError(error, access, ctx, call.report) : internalServerError(error, call.report);
      }
    case 'errored':
      markReplayed(access, ctx, 'workflow');
      throw trpcErrorFromStored(info.error!);
    case 'cancelled':
    case 'deadline_exceeded':
      markReplayed(access, ctx, 'workflow');
      throw cancelledError(info.error?.message);
    case 'waiting':
      if (info.wait) return { kind: 'accepted', wait: info.wait, replayed: true };
      throw inProgress(access, ctx, 1_000);
    case 'needs_review':
      throw inProgress(access, ctx, REVIEW_RETRY_AFTER_MS);
    case 'running':
    case 'failed': {
      // Running somewhere (a failed run this call resumed included): the retry gets its answer.
      const leftMs = info.leaseExpiresAt ? info.leaseExpiresAt.getTime() - Date.now() : 1_000;
      throw inProgress(access, ctx, Math.min(Math.max(leftMs, 1_000), 10_000));
    }
  }
}

function cancelledError(reason: string | undefined): TRPCError {
  return new TRPCError({ code: 'PRECONDITION_FAILED', message: `The operation for this key was cancelled: ${reason ?? 'cancelled'}` });
}

/** A mismatch is 422; a queue the engine does not register is the server's bug, said plainly (500). */
function enqueueFailure<Ctx>(error: unknown, call: QueuedCall<Ctx>): TRPCError {
  if (isStepkeyError(error, 'mismatch')) {
    const existing = error.details.existing as Partial<KeyUse> | undefined;
    return mismatch({ kind: existing?.kind ?? 'run', name: existing?.name ?? null }, { kind: 'run', name: call.workflow.name });
  }
  if (isStepkeyError(error, 'invalid_options')) {
    // The procedure's own options (its queue, its priority), not the caller's input.
    const failure = new StepkeyError('definition_error', `Procedure ${call.path}: ${error.message}`, { cause: error });
    return new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: failure.message, cause: failure });
  }
  return isStepkeyError(error) ? toServiceError(error, call.access, call.ctx, call.report) : internalServerError(error, call.report);
}
