/**
 * createWorkflowRouter: typed procedures for registered workflows.
 *
 *   <name>.start    mutation, Idempotency-Key required: starts the run (or
 *                   joins the existing one) and answers once its row has
 *                   committed, without waiting for it to finish
 *   <name>.status   query { key }: the run's status, output or error, steps
 *
 * Runs are scoped by the caller like every key: a caller reads only its own.
 * Build on your own base procedure (`{ procedure: protectedProcedure }`) so
 * that authentication and rate limits run before anything is claimed.
 * Failures answer through toServiceError (503 + Retry-After while Postgres is
 * unavailable); a key the engine refuses is a 400.
 */
import { TRPCError, type TRPCMutationProcedure, type TRPCQueryProcedure } from '@trpc/server';
import { z } from 'zod';
import { isStepkeyError } from '../errors/stepkey-error.js';
import type { StoredError } from '../ledger/outcome.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import type { RunStatus, StepInfo } from '../workflow/run-info.js';
import { decodeValue } from '../workflow/values.js';
import type { createIdempotency } from './idempotency.js';
import { fingerprintOrBadRequest, mismatch, readKeyedRequest } from './keyed-request.js';
import { toServiceError } from './service-error.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;
type Idempotency<Ctx extends object> = ReturnType<typeof createIdempotency<Ctx>>;

export interface StartedRun {
  key: string;
  rootKey: string;
  /** false when the key already had this run: it was joined, not started again. */
  started: boolean;
}

export interface RunStatusView<Output> {
  key: string;
  workflow: string;
  version: number | null;
  status: RunStatus;
  resumable: boolean;
  output?: Output;
  error?: StoredError;
  attempts: number;
  steps: Pick<StepInfo, 'name' | 'ok' | 'attempts'>[];
}

export type WorkflowProcedures<Workflows extends Record<string, Workflow>> = {
  [K in keyof Workflows]: {
    start: TRPCMutationProcedure<{ input: InputOf<Workflows[K]>; output: StartedRun; meta: object }>;
    status: TRPCQueryProcedure<{
      input: { key: string };
      output: RunStatusView<WorkflowResult<Workflows[K]>> | null;
      meta: object;
    }>;
  };
};

/** A procedure builder: `t.procedure`, or one with middlewares (`t.procedure.use(auth)`). */
export interface BaseProcedure {
  input: (schema: z.ZodType) => { mutation: (resolver: never) => unknown; query: (resolver: never) => unknown };
}

/** The part of `initTRPC…create()` this needs: its procedure builder. */
interface ProcedureFactory {
  procedure: BaseProcedure;
}

export interface WorkflowRouterOptions {
  /**
   * The procedure every `start` and `status` is built on (default:
   * `t.procedure`). Its middlewares — authentication, rate limits — run
   * before the key is read or claimed.
   */
  procedure?: BaseProcedure;
}

export function createWorkflowRouter<Ctx extends object, Workflows extends Record<string, Workflow>>(
  t: ProcedureFactory,
  idempotency: Idempotency<Ctx>,
  workflows: Workflows,
  options: WorkflowRouterOptions = {},
): WorkflowProcedures<Workflows> {
  const { config, access } = idempotency;
  const engine = config.engine;
  if (!engine) throw new Error('createWorkflowRouter needs createIdempotency({ engine }).');
  const base = options.procedure ?? t.procedure;
  const record: Record<string, unknown> = {};
  for (const [name, workflow] of Object.entries(workflows)) {
    engine.registry.require(workflow);
    const start = base.input(workflow.input).mutation((async (opts: { ctx: Ctx; input: unknown; path: string }) => {
        const request = readKeyedRequest(config, access, opts.ctx, 'required')!;
        const fingerprint = fingerprintOrBadRequest(opts.path, opts.input, undefined);
        try {
          const handle = await engine.start(workflow, request, opts.input as never, { fingerprint });
          if (!handle.started) access.setHeader(opts.ctx, 'Idempotent-Replayed', 'true');
          return { key: handle.key, rootKey: handle.rootKey, started: handle.started } satisfies StartedRun;
        } catch (error) {
          if (isStepkeyError(error, 'mismatch')) throw mismatch(workflow.name);
          throw isStepkeyError(error) ? toServiceError(error, access, opts.ctx) : error;
        }
      }) as never);
    const status = base.input(z.object({ key: z.string().min(1).max(255) })).query((async (opts: {
      ctx: Ctx;
      input: { key: string };
    }) => {
      const scope = config.scope(opts.ctx);
      if (!scope) throw new TRPCError({ code: 'UNAUTHORIZED', message: 'Reading a run needs an identified caller.' });
      let info;
      try {
        info = await engine.get({ scope, key: opts.input.key });
      } catch (error) {
        // A key the engine refuses is a 400, an unavailable database a 503 + Retry-After.
        throw isStepkeyError(error) ? toServiceError(error, access, opts.ctx) : error;
      }
      if (!info || info.workflow !== workflow.name) return null;
      const view: RunStatusView<unknown> = {
        key: info.key,
        workflow: info.workflow,
        version: info.version,
        status: info.status,
        resumable: info.resumable,
        attempts: info.attempts,
        steps: info.steps.map(({ name: step, ok, attempts }) => ({ name: step, ok, attempts })),
      };
      if (info.output !== undefined) view.output = decodeValue(info.output, workflow.output, `The result of '${workflow.name}'`);
      if (info.error) view.error = info.error;
      return view;
    }) as never);
    record[name] = { start, status };
  }
  return record as WorkflowProcedures<Workflows>;
}
