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
import type { RunStatus, StepInfo } from '../read/run-info.js';
import { decodeRunResult } from '../workflow/outcomes.js';
import type { createIdempotency } from './idempotency.js';
import { fingerprintsOrBadRequest } from '../idempotency/fingerprints.js';
import { queueNameOf } from '../idempotency/queued-run.js';
import { mismatch, type KeyUse } from '../idempotency/refusal.js';
import { forTrpc, markReplayed, readKeyedRequest, trpcError } from './keyed-request.js';
import { instrument } from '../telemetry/instrumentation.js';
import { toServiceError } from './service-error.js';
import type { RequestAccess } from './request-access.js';
import { errorReport } from './internal-error.js';
import type { Queue } from '../flow/define-queue.js';
import type { QueuePlace } from '../read/sql/queue-places.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;
type Idempotency<Ctx extends object> = ReturnType<typeof createIdempotency<Ctx>>;

export interface StartedRun {
  key: string;
  /** What the run's step keys derive from (null while another call's start of the run has not committed). */
  rootKey: string | null;
  /** false when the key already had this run: it was joined, not started again. */
  started: boolean;
  /** On a queue (the router's `queues` option): true while the run waits for a slot. */
  queued?: boolean;
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
  /** What a waiting run waits for (a queued one: kind 'slot'). */
  wait?: { kind: string; step: string; until: string | null; for: string | null };
  /** A run on a queue: its queue, partition, whether it holds a slot, and its position in its partition's line (1: next). */
  queue?: Pick<QueuePlace, 'queue' | 'partition' | 'priority' | 'holding' | 'position' | 'partitionWaiting'>;
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
  input: (schema: z.ZodType) => {
    mutation: (resolver: never) => unknown;
    query: (resolver: never) => unknown;
    use: (middleware: never) => { mutation: (resolver: never) => unknown };
  };
}

/** Where `start`'s middleware leaves the input as the caller sent it, for the fingerprint. */
const rawInputKey = Symbol('stepkey.rawInput');

/** Passes the raw input (before the schema's defaults) on to the resolver. */
const captureRawInput = async (opts: { getRawInput: () => Promise<unknown>; next: (o: { ctx: object }) => Promise<unknown> }) =>
  opts.next({ ctx: { [rawInputKey]: await opts.getRawInput() } });

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
  /**
   * Workflows whose `start` puts the run on a queue (engine.enqueue) instead
   * of starting it at once, by the workflows' names in this router:
   * `{ queues: { exportReport: reports } }`.
   */
  queues?: Record<string, Queue<any> | string>;
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
    const queueOption = options.queues?.[name];
    const queue = queueOption === undefined ? undefined : queueNameOf(queueOption, `createWorkflowRouter: ${name}`, engine);
    const start = base.input(workflow.input).use(captureRawInput as never).mutation((async (opts: { ctx: Ctx; input: unknown; path: string }) => {
        const request = readKeyedRequest(config, access, opts.ctx, 'required')!;
        const raw = (opts.ctx as { [rawInputKey]?: unknown })[rawInputKey];
        try {
          const fingerprints = fingerprintsOrBadRequest(opts.path, { raw, validated: opts.input }, undefined);
          if (queue !== undefined) {
            const handle = await engine.enqueue(workflow, request, opts.input as never, { queue, ...fingerprints });
            if (!handle.started) joined(access, opts.ctx);
            return { key: handle.key, rootKey: handle.rootKey, started: handle.started, queued: handle.queued } satisfies StartedRun;
          }
          const handle = await engine.start(workflow, request, opts.input as never, fingerprints);
          if (!handle.started) joined(access, opts.ctx);
          return { key: handle.key, rootKey: handle.rootKey, started: handle.started } satisfies StartedRun;
        } catch (error) {
          if (isStepkeyError(error, 'mismatch')) throw trpcError(mismatch(mismatchedUse(error), { kind: 'run', name: workflow.name }, 'procedure'), access, opts.ctx);
          if (isStepkeyError(error)) throw toServiceError(error, access, opts.ctx, errorReport(config, opts.path, request));
          throw forTrpc(error, access, opts.ctx);
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
        throw isStepkeyError(error) ? toServiceError(error, access, opts.ctx, errorReport(config, undefined, { scope, key: opts.input.key })) : error;
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
      if (info.output !== undefined) {
        try {
          // Read with the output schema of the version that ran it.
          view.output = decodeRunResult(engine.registry, { state: 'completed', body: info.output, workflow: info.workflow, version: info.version });
        } catch (error) {
          throw isStepkeyError(error) ? toServiceError(error, access, opts.ctx) : error;
        }
      }
      if (info.error) view.error = info.error;
      if (info.wait) view.wait = { kind: info.wait.kind, step: info.wait.step, until: info.wait.until?.toISOString() ?? null, for: info.wait.for };
      if (info.queue) {
        const { queue: onQueue, partition, priority, holding, position, partitionWaiting } = info.queue;
        view.queue = { queue: onQueue, partition, priority, holding, position, partitionWaiting };
      }
      return view;
    }) as never);
    record[name] = { start, status };
  }
  return record as WorkflowProcedures<Workflows>;
}

/** A start that joined the key's run: answered as a replay. */
function joined<Ctx>(access: RequestAccess<Ctx>, ctx: Ctx): void {
  instrument.replayed('workflow');
  markReplayed(access, ctx);
}

/** What the key was first used for, from the engine's mismatch error. */
function mismatchedUse(error: { details: Record<string, unknown> }): KeyUse {
  const existing = error.details.existing as Partial<KeyUse> | undefined;
  return { kind: existing?.kind ?? 'run', name: existing?.name ?? null };
}
