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
import { isStepkeyError } from '../errors/stepkey-error.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import { trpcErrorFromStored } from './error-policy.js';
import type { IdempotencyConfig } from './idempotency.js';
import { fingerprintOrBadRequest, inProgress, mismatch, readKeyedRequest, validatedInput } from './keyed-request.js';
import type { RequestAccess } from './request-access.js';
import { toServiceError } from './service-error.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

export interface WorkflowProcedureOptions<Ctx, W extends Workflow> {
  /** The workflow's input from the procedure's validated input (default: the same value). */
  input?: (input: unknown, ctx: Ctx) => InputOf<W>;
  /** Volatile input fields left out of the fingerprint. */
  exclude?: string[];
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
  return experimental_standaloneMiddleware<{ ctx: Ctx; input: unknown }>().create(async (opts) => {
    const engine = config.engine;
    if (!engine) throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: 'createIdempotency({ engine }) is needed for workflow procedures.' });
    const ctx = opts.ctx as unknown as Ctx;
    const request = readKeyedRequest(config, access, ctx, 'required')!;
    const validated = await validatedInput(opts, 'idempotency.workflow(workflow)');
    const fingerprint = fingerprintOrBadRequest(opts.path, validated, options.exclude);
    const input = options.input ? options.input(validated, ctx) : (validated as InputOf<W>);
    let attempt;
    try {
      attempt = await engine.attempt(workflow, request, input, { fingerprint });
    } catch (error) {
      // A retryable error is not stored: a failed run resumes, a stopped one continues elsewhere. The retry goes on with it.
      throw isStepkeyError(error) ? toServiceError(error, access, ctx) : error;
    }
    switch (attempt.state) {
      case 'completed':
        if (attempt.replayed) access.setHeader(ctx, 'Idempotent-Replayed', 'true');
        return opts.next<Overrides>({
          ctx: { run: { output: attempt.output as WorkflowResult<W>, replayed: attempt.replayed, ...request } },
        });
      case 'errored':
        if (attempt.replayed) access.setHeader(ctx, 'Idempotent-Replayed', 'true');
        throw trpcErrorFromStored(attempt.error);
      case 'cancelled':
        access.setHeader(ctx, 'Idempotent-Replayed', 'true');
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: `The operation for this key was cancelled: ${attempt.reason.message}` });
      case 'in_progress':
        throw inProgress(access, ctx, attempt.retryAfterMs);
      case 'mismatch':
        throw mismatch(attempt.existing.name);
    }
  });
}
