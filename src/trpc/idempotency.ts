/**
 * Idempotent tRPC procedures, with the answers of the IETF Idempotency-Key
 * draft and of Stripe's API:
 *
 *   no key on a required procedure, a malformed key, several keys   400, nothing runs
 *   first call        the resolver runs inside claim-and-commit; its writes
 *                     (ctx.idempotency.db / .sql) commit with the stored result
 *   repeat            the stored result, byte for byte, Idempotent-Replayed: true
 *   while in progress 409 + Retry-After, at once
 *   another input or another procedure with the key   422, nothing changes
 *   resolver error    a deterministic client error is stored and replayed;
 *                     anything else releases the key and the retry runs
 *   ledger down       503 + Retry-After (fail closed), or run without
 *                     idempotency when the procedure says so (fail open)
 *
 * Keys are scoped by the caller (config.scope); an unidentified caller gets
 * 401 rather than a shared scope. Use the middleware after `.input()`, so the
 * fingerprint covers the validated input.
 */
import { TRPCError, experimental_standaloneMiddleware } from '@trpc/server';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import type { DrizzleTx } from '../db/connect.js';
import type { TxSql } from '../db/transaction.js';
import { StepkeyError, isStepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { purposeFingerprint } from '../keys/fingerprint.js';
import type { Ledger } from '../ledger/ledger.js';
import { toJsonText } from '../ledger/outcome.js';
import type { Engine } from '../workflow/engine.js';
import type { Workflow } from '../workflow/define.js';
import { workflowMiddleware, type WorkflowProcedureOptions } from './workflow-procedure.js';
import { storedTrpcError, toTrpcError, trpcErrorFromStored } from './error-policy.js';
import { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey } from './header.js';
import { replayResult } from './replay-result.js';
import { defaultRequestAccess, type RequestAccess } from './request-access.js';
import { outputTransformer, type TransformerOption } from './transformer.js';

export interface IdempotencyConfig<Ctx extends object> {
  ledger: Ledger;
  /** Needed for workflow procedures. */
  engine?: Engine;
  /** The caller's identity: keys are scoped by it. null/undefined: an anonymous caller. */
  scope: (ctx: Ctx) => string | null | undefined;
  /** The router's transformer (superjson, …), if it has one. */
  transformer?: TransformerOption;
  /** How to read headers from ctx and set response headers (default: Node and fetch adapters). */
  access?: RequestAccess<Ctx>;
}

export interface ProcedureIdempotencyOptions {
  /** 'required' (default): a call without a key gets 400. 'optional': it runs without idempotency. */
  mode?: 'required' | 'optional';
  /** When the ledger cannot be reached: 'closed' (default) answers 503, 'open' runs without idempotency. */
  onLedgerDown?: 'closed' | 'open';
  /** Volatile input fields left out of the fingerprint, e.g. ['clientTime']. */
  exclude?: string[];
  /** How long the key is kept after completion (default: the ledger's retention). */
  retentionMs?: number;
}

/** What the resolver of an idempotent procedure finds in ctx.idempotency. */
export interface IdempotencyContext {
  key: string;
  scope: string;
  /** The claim's transaction: writes here commit together with the stored result. */
  sql: TxSql;
  db: DrizzleTx;
  /** true when the ledger was down and the procedure fails open: writes are not tied to the key. */
  bypassed: boolean;
}

/** Seconds for Retry-After: at least 1. */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}

export interface KeyedRequest {
  key: string;
  scope: string;
}

/**
 * The checks every idempotent call passes before anything is claimed: one
 * well-formed key, not in a multi-operation batch, from an identified caller.
 * Returns undefined when an optional key is absent.
 */
export function readKeyedRequest<Ctx extends object>(
  config: IdempotencyConfig<Ctx>,
  access: RequestAccess<Ctx>,
  ctx: Ctx,
  mode: 'required' | 'optional',
): KeyedRequest | undefined {
  const values = access.header(ctx, IDEMPOTENCY_KEY_HEADER);
  if (values.length === 0 && mode === 'optional') return undefined;
  if (values.length > 0 && access.operations(ctx) > 1) {
    throw new TRPCError({
      code: 'BAD_REQUEST',
      message: `This batched request carries one ${IDEMPOTENCY_KEY_HEADER} for ${access.operations(ctx)} operations; send each keyed mutation in a request of its own.`,
    });
  }
  const parsed = parseIdempotencyKey(values);
  if (!parsed.ok) throw new TRPCError({ code: 'BAD_REQUEST', message: parsed.message });
  const scope = config.scope(ctx);
  if (!scope) {
    throw new TRPCError({
      code: 'UNAUTHORIZED',
      message: `An ${IDEMPOTENCY_KEY_HEADER} needs an identified caller: keys are scoped per caller, and anonymous callers never share one.`,
    });
  }
  return { key: parsed.key, scope };
}

export function fingerprintOrBadRequest(path: string, input: unknown, exclude: string[] | undefined): string {
  try {
    return purposeFingerprint(path, input, exclude ? { exclude } : {});
  } catch (error) {
    throw new TRPCError({ code: 'BAD_REQUEST', message: (error as Error).message, cause: error });
  }
}

export function createIdempotency<Ctx extends object>(config: IdempotencyConfig<Ctx>) {
  const access = config.access ?? defaultRequestAccess<Ctx>();
  const transformer = outputTransformer(config.transformer);
  let pool: PostgresJsDatabase | undefined;

  return {
    config,
    access,
    /**
     * A procedure that runs a workflow: one ledger row for the request and
     * its run. The resolver gets ctx.run.output — the stored output on every
     * replay — and renders the answer from it.
     */
    workflow<W extends Workflow>(workflow: W, options: WorkflowProcedureOptions<Ctx, W> = {}) {
      return workflowMiddleware(config, access, workflow, options);
    },
    /** Claim-and-commit around a procedure (use after `.input()`). */
    procedure(options: ProcedureIdempotencyOptions = {}) {
      const mode = options.mode ?? 'required';
      type Overrides = { idempotency: IdempotencyContext | undefined };
      return experimental_standaloneMiddleware<{ ctx: Ctx; input: unknown }>().create(async (opts) => {
        type Result = Awaited<ReturnType<typeof opts.next<Overrides>>>;
        const ctx = opts.ctx as unknown as Ctx;
        const request = readKeyedRequest(config, access, ctx, mode);
        if (!request) return opts.next<Overrides>({ ctx: { idempotency: undefined } });
        const fingerprint = fingerprintOrBadRequest(opts.path, opts.input, options.exclude);
        let first: Result | undefined;
        let result;
        try {
          result = await config.ledger.once(
            { ...request, fingerprint, kind: 'request', name: opts.path },
            async ({ sql, db }) => {
              first = await opts.next<Overrides>({ ctx: { idempotency: { ...request, sql, db, bypassed: false } } });
              if (!first.ok) throw toTrpcError(first.error);
              return first.data;
            },
            {
              serialize: (data) => toJsonText(transformer.serialize(data), `result of ${opts.path}`),
              code: 200,
              storeError: (error) => (error instanceof TRPCError ? storedTrpcError(error) : undefined),
              ...(options.retentionMs === undefined ? {} : { retentionMs: options.retentionMs }),
            },
          );
        } catch (error) {
          if (isStepkeyError(error) && (error.code === 'database_unavailable' || error.code === 'database_error') && !first) {
            if (options.onLedgerDown === 'open') {
              pool ??= drizzle({ client: config.ledger.sql });
              const bypassed = { ...request, sql: config.ledger.sql as unknown as TxSql, db: pool as unknown as DrizzleTx, bypassed: true };
              return opts.next<Overrides>({ ctx: { idempotency: bypassed } });
            }
            access.setHeader(ctx, 'Retry-After', '1');
            throw new TRPCError({ code: 'SERVICE_UNAVAILABLE', message: 'The idempotency ledger is unavailable; retry later.', cause: error });
          }
          throw isStepkeyError(error) ? toServiceError(error) : error;
        }
        switch (result.state) {
          case 'executed':
            faultPoint('trpc.before-response', opts.path);
            if (!result.ok) throw result.error;
            return first!;
          case 'replay': {
            access.setHeader(ctx, 'Idempotent-Replayed', 'true');
            if (!result.outcome.ok) throw trpcErrorFromStored(JSON.parse(result.outcome.body));
            return replayResult<Result>(ctx, transformer.deserialize(JSON.parse(result.outcome.body)));
          }
          case 'in_progress':
            throw inProgress(access, ctx, result.retryAfterMs);
          case 'mismatch':
            throw mismatch(result.existing.name);
        }
      });
    },
  };
}

/** 409 with Retry-After: another attempt with this key is still working. */
export function inProgress<Ctx>(access: RequestAccess<Ctx>, ctx: Ctx, retryAfterMs: number): TRPCError {
  const seconds = retryAfterSeconds(retryAfterMs);
  access.setHeader(ctx, 'Retry-After', seconds);
  return new TRPCError({
    code: 'CONFLICT',
    message: `A request with this ${IDEMPOTENCY_KEY_HEADER} is still in progress; retry after ${seconds} s.`,
  });
}

export function mismatch(existingName: string | null): TRPCError {
  return new TRPCError({
    code: 'UNPROCESSABLE_CONTENT',
    message: `This ${IDEMPOTENCY_KEY_HEADER} was already used for another request (${existingName ?? 'unknown'} with different input); a key names one operation.`,
  });
}

function toServiceError(error: StepkeyError): TRPCError {
  const code = error.httpStatus >= 500 ? 'INTERNAL_SERVER_ERROR' : 'BAD_REQUEST';
  return new TRPCError({ code, message: error.message, cause: error });
}
