/**
 * A tRPC procedure that runs a workflow. It does not claim the key itself: it
 * hands its scope, key and fingerprint (procedure path + input) to the
 * engine, so the request and the run are one ledger row. The run's stored
 * output is what every replay renders its answer from; a retry after a crash
 * resumes the run (or gets 409 while it still runs) instead of starting
 * another. What it answers is the core's (idempotency/run-answer.ts, which
 * stepkey/http's workflow routes share); this module renders it for tRPC.
 * Claim failures answer 503 + Retry-After when Postgres is unavailable, 409 +
 * Retry-After when the run continues in another process.
 */
import { TRPCError, experimental_standaloneMiddleware } from '@trpc/server';
import type { z } from 'zod';
import { StepkeyError } from '../errors/stepkey-error.js';
import { definedExclude, fingerprintsOrBadRequest } from '../idempotency/fingerprints.js';
import { queueNameOf } from '../idempotency/queued-run.js';
import { cancelled } from '../idempotency/refusal.js';
import { answerRun } from '../idempotency/run-answer.js';
import { waitingAnswer, type WaitingAnswer } from '../idempotency/waiting-answer.js';
import type { Queue } from '../flow/define-queue.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import { trpcErrorFromStored } from './error-policy.js';
import type { IdempotencyConfig } from './idempotency.js';
import { errorReport } from './internal-error.js';
import { forTrpc, markReplayed, readKeyedRequest, trpcError, validatedInput } from './keyed-request.js';
import type { RequestAccess } from './request-access.js';
import { replayResult } from './replay-result.js';

export { waitingAnswer, type WaitingAnswer } from '../idempotency/waiting-answer.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

export interface WorkflowProcedureOptions<Ctx, W extends Workflow> {
  /** The workflow's input from the procedure's validated input (default: the same value). */
  input?: (input: unknown, ctx: Ctx) => InputOf<W>;
  /** Volatile input fields left out of the fingerprint. */
  exclude?: string[];
  /**
   * Put each run on this queue (engine.enqueue) instead of starting it at
   * once: a full queue answers 202, as for a run that waits (idempotency/queued-run.ts).
   */
  queue?: Queue<any> | string;
  /** With `queue`: the run's priority (-1000..1000, default 0), or one computed from the workflow's input and ctx. */
  priority?: number | ((input: InputOf<W>, ctx: Ctx) => number);
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
  const exclude = definedExclude(options.exclude, `idempotency.workflow(${workflow.name})`);
  return experimental_standaloneMiddleware<{ ctx: Ctx; input: unknown }>().create(async (opts) => {
    type Result = Awaited<ReturnType<typeof opts.next<Overrides>>>;
    const engine = config.engine;
    if (!engine) throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: 'createIdempotency({ engine }) is needed for workflow procedures.' });
    const ctx = opts.ctx as unknown as Ctx;
    const request = readKeyedRequest(config, access, ctx, 'required')!;
    const received = await validatedInput(opts, 'idempotency.workflow(workflow)');
    let answer;
    try {
      const fingerprints = fingerprintsOrBadRequest(opts.path, received, exclude);
      const input = options.input ? options.input(received.validated, ctx) : (received.validated as InputOf<W>);
      const priority = typeof options.priority === 'function' ? options.priority(input, ctx) : options.priority;
      answer = await answerRun({
        engine, workflow, request, input, fingerprints, name: opts.path, noun: 'procedure',
        report: errorReport(config, opts.path, request),
        ...(queue === undefined ? {} : { queue: { name: queue, priority } }),
      });
    } catch (error) {
      throw forTrpc(error, access, ctx);
    }
    if (answer.replayed) markReplayed(access, ctx);
    switch (answer.kind) {
      case 'completed':
        return opts.next<Overrides>({ ctx: { run: { output: answer.output as WorkflowResult<W>, replayed: answer.replayed, ...request } } });
      case 'errored':
        throw trpcErrorFromStored(answer.error);
      case 'cancelled':
        throw trpcError(cancelled(answer.reason), access, ctx);
      case 'accepted':
        // 202 Accepted, without the resolver: the run waits (a timer, an event, a queue's slot) and continues on its own.
        access.setStatus?.(ctx, 202);
        return replayResult<Result>(opts.ctx, waitingAnswer(request.key, answer.wait));
    }
  });
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
