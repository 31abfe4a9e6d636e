/**
 * A tRPC procedure that runs a workflow. It does not claim the key itself: it
 * hands its scope, key and fingerprint (procedure path + input) to the
 * engine, so the request and the run are one ledger row. The run's stored
 * output is what every replay renders its answer from; a retry after a crash
 * resumes the run (or gets 409 while it still runs) instead of starting
 * another. Claim failures answer through toServiceError: 503 + Retry-After
 * when Postgres is unavailable, 409 + Retry-After when the run continues in
 * another process.
 */
import { TRPCError, experimental_standaloneMiddleware } from '@trpc/server';
import type { z } from 'zod';
import { isStepkeyError, StepkeyError } from '../errors/stepkey-error.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import { trpcErrorFromStored } from './error-policy.js';
import type { IdempotencyConfig } from './idempotency.js';
import { fingerprintsOrBadRequest, inProgress, markReplayed, mismatch, readKeyedRequest, validatedInput } from './keyed-request.js';
import type { RequestAccess } from './request-access.js';
import { toServiceError } from './service-error.js';
import { errorReport, internalServerError } from './internal-error.js';
import { replayResult } from './replay-result.js';
import type { RunWaitView } from '../lifecycle/wait.js';
import { answerQueued, queueNameOf, type QueueProcedureOptions } from './queued-workflow.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

export interface WorkflowProcedureOptions<Ctx, W extends Workflow> {
  /** The workflow's input from the procedure's validated input (default: the same value). */
  input?: (input: unknown, ctx: Ctx) => InputOf<W>;
  /** Volatile input fields left out of the fingerprint. */
  exclude?: string[];
  /**
   * Put each run on this queue (engine.enqueue) instead of starting it at
   * once: a full queue answers 202, as for a run that waits (queued-workflow.ts).
   */
  queue?: QueueProcedureOptions<Ctx, InputOf<W>>['queue'];
  /** With `queue`: the run's priority (-1000..1000, default 0), or one computed from the workflow's input and ctx. */
  priority?: QueueProcedureOptions<Ctx, InputOf<W>>['priority'];
}

/** What the resolver of a workflow procedure finds in ctx.run. */
export interface RunContextForResolver<Output> {
  output: Output;
  /** true when this answer replays a run that had already completed. */
  replayed: boolean;
  key: string;
  scope: string;
}

export function workflowMiddleware<Ctx extends object, W extends Workflow>(
  config: IdempotencyConfig<Ctx>,
  access: RequestAccess<Ctx>,
  workflow: W,
  options: WorkflowProcedureOptions<Ctx, W>,
) {
  type Overrides = { run: RunContextForResolver<WorkflowResult<W>> };
  const queue = options.queue === undefined ? undefined : queueNameOf(options.queue, `idempotency.workflow(${workflow.name})`, config.engine);
  if (queue === undefined && options.priority !== undefined) {
    throw new StepkeyError('definition_error', `idempotency.workflow(${workflow.name}): a priority needs a queue.`);
  }
  return experimental_standaloneMiddleware<{ ctx: Ctx; input: unknown }>().create(async (opts) => {
    const engine = config.engine;
    if (!engine) throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: 'createIdempotency({ engine }) is needed for workflow procedures.' });
    const ctx = opts.ctx as unknown as Ctx;
    const request = readKeyedRequest(config, access, ctx, 'required')!;
    const received = await validatedInput(opts, 'idempotency.workflow(workflow)');
    const fingerprints = fingerprintsOrBadRequest(opts.path, received, options.exclude);
    const input = options.input ? options.input(received.validated, ctx) : (received.validated as InputOf<W>);
    if (queue !== undefined) {
      const priority = typeof options.priority === 'function' ? options.priority(input, ctx) : options.priority;
      const answer = await answerQueued({
        engine, access, ctx, path: opts.path, request, workflow, input, queue, priority, fingerprints,
        report: errorReport(config, opts.path, request),
      });
      if (answer.kind === 'completed') {
        if (answer.replayed) markReplayed(access, ctx, 'workflow');
        return opts.next<Overrides>({ ctx: { run: { output: answer.output as WorkflowResult<W>, replayed: answer.replayed, ...request } } });
      }
      // 202 Accepted, as for a run that waits: queued for a slot, or parked on a wait of its own.
      if (answer.replayed) access.setHeader(ctx, 'Idempotent-Replayed', 'true');
      access.setStatus?.(ctx, 202);
      return replayResult<Awaited<ReturnType<typeof opts.next<Overrides>>>>(opts.ctx, waitingAnswer(request.key, answer.wait));
    }
    let attempt;
    try {
      attempt = await engine.attempt(workflow, request, input, fingerprints);
    } catch (error) {
      // A retryable error is not stored: a failed run resumes, a stopped one continues elsewhere. The retry goes on with it.
      // A failed run answers a fixed message and an error id; the log line with that id has the step's error.
      const report = errorReport(config, opts.path, request);
      throw isStepkeyError(error) ? toServiceError(error, access, ctx, report) : internalServerError(error, report);
    }
    switch (attempt.state) {
      case 'completed':
        if (attempt.replayed) markReplayed(access, ctx, 'workflow');
        return opts.next<Overrides>({
          ctx: { run: { output: attempt.output as WorkflowResult<W>, replayed: attempt.replayed, ...request } },
        });
      case 'errored':
        if (attempt.replayed) markReplayed(access, ctx, 'workflow');
        throw trpcErrorFromStored(attempt.error);
      case 'cancelled':
      case 'deadline_exceeded':
        // Cancelled under this very call (an operator stopped the run it executed): its first answer.
        // A run past its deadline is answered as a cancelled one, saying so.
        if (attempt.replayed) markReplayed(access, ctx, 'workflow');
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: `The operation for this key was cancelled: ${attempt.reason.message}` });
      case 'waiting':
        // 202 Accepted, without the resolver: the run waits and continues on its own.
        if (attempt.replayed) access.setHeader(ctx, 'Idempotent-Replayed', 'true');
        access.setStatus?.(ctx, 202);
        return replayResult<Awaited<ReturnType<typeof opts.next<Overrides>>>>(opts.ctx, waitingAnswer(request.key, attempt.wait));
      case 'in_progress':
        throw inProgress(access, ctx, attempt.retryAfterMs);
      case 'mismatch':
        throw mismatch(attempt.existing, { kind: 'run', name: workflow.name });
    }
  });
}

/**
 * What a workflow procedure answers (202) while its run waits: the key, and
 * what the run waits for — until when, for which event or child run. A repeat
 * while it waits gets the same, marked Idempotent-Replayed.
 */
export interface WaitingAnswer {
  key: string;
  status: 'waiting';
  /** timer, event, child (and, with flow control, slot or limit; review for an operator). */
  waitingFor: RunWaitView['kind'];
  step: string;
  /** ISO time when it is due (a timer; an event's deadline). */
  until?: string;
  /** The event it waits for. */
  topic?: string;
  /** The child run (its key, in the same scope) it waits for. */
  child?: string;
  /** The queue a queued run waits on for a slot (its position: engine.get(ref).queue). */
  queue?: string;
}

export function waitingAnswer(key: string, wait: RunWaitView): WaitingAnswer {
  const answer: WaitingAnswer = { key, status: 'waiting', waitingFor: wait.kind, step: wait.step };
  if (wait.until) answer.until = wait.until.toISOString();
  if (wait.kind === 'event' && wait.for) answer.topic = wait.for;
  if (wait.kind === 'child' && wait.for) answer.child = wait.for;
  if (wait.kind === 'slot' && wait.for) answer.queue = wait.for;
  return answer;
}

/**
 * Types the resolver of a workflow procedure whose run can wait: its output
 * is what the resolver renders, or — answered by the middleware, without
 * calling it — the WaitingAnswer of a run that waits.
 *
 *   .use(idempotency.workflow(approval)).mutation(answersWaiting(({ ctx }) => ctx.run.output))
 */
export function answersWaiting<Args, Output>(
  resolver: (args: Args) => Output | Promise<Output>,
): (args: Args) => Promise<Output | WaitingAnswer> {
  return async (args) => resolver(args);
}
