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
 *   resolver returns nothing   stored as '' and replayed as undefined
 *   Postgres unavailable   503 + Retry-After (fail closed), or — before the
 *                     resolver ran — run without idempotency when the
 *                     procedure says so (fail open); other database
 *                     failures 500. No answer shows the driver's message:
 *                     a 500 says "…failed (error id err-…)" and the log line
 *                     with that id has the error (internal-error.ts).
 *
 * The key handling, fingerprint, claim and answers are stepkey's one core
 * (src/idempotency/), which stepkey/http adapts to HTTP servers too: this
 * module is its tRPC adapter. Keys are scoped by the caller (config.scope); an
 * unidentified caller gets 401 rather than a shared scope. The fingerprint covers the procedure path
 * and the input as the caller sent it (see keys/fingerprint.ts). Use the
 * middleware after `.input()`, so that a schema error is answered before
 * anything is claimed; placed before it, every keyed call is refused with a
 * 500 that says so.
 */
import { TRPCError, experimental_standaloneMiddleware } from '@trpc/server';
import { isConnectionError } from '../errors/pg-errors.js';
import { isStepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { definedExclude, fingerprintsOrBadRequest } from '../idempotency/fingerprints.js';
import { runKeyed } from '../idempotency/keyed-call.js';
import type { BypassedIdempotency, IdempotencyContext, IdempotencyContextFor, KeyedCallOptions } from '../idempotency/options.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log/logger.js';
import type { Workflow } from '../workflow/define.js';
import type { Engine } from '../engine/engine.js';
import { decodeValue, encodeValue } from '../workflow/values.js';
import { storedTrpcError, toTrpcError, trpcErrorFromStored } from './error-policy.js';
import { errorReport, internalServerError, isWrappedUnexpected } from './internal-error.js';
import { forTrpc, markReplayed, readKeyedRequest, validatedInput } from './keyed-request.js';
import { replayResult } from './replay-result.js';
import { defaultRequestAccess, type RequestAccess } from './request-access.js';
import { outputTransformer, type TransformerOption } from './transformer.js';
import { workflowMiddleware, type WorkflowProcedureOptions } from './workflow-procedure.js';

export type { BypassedIdempotency, IdempotencyContext, IdempotencyContextFor } from '../idempotency/options.js';

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
  /**
   * Where an internal failure's full error is logged with the error id its 500
   * names (event `trpc.internal_error`): a pino logger or one with its
   * methods, false for none (default: pino if installed).
   */
  logger?: Logger | false;
}

/** A procedure's options: mode, onLedgerDown, exclude, retentionMs (idempotency/options.ts). */
export type ProcedureIdempotencyOptions = KeyedCallOptions;

export function createIdempotency<Ctx extends object>(config: IdempotencyConfig<Ctx>) {
  const access = config.access ?? defaultRequestAccess<Ctx>();
  const transformer = outputTransformer(config.transformer);

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
    /**
     * Claim-and-commit around a procedure. Use it after `.input()`: a call
     * that reaches it before validation is refused as misconfigured.
     */
    procedure<O extends ProcedureIdempotencyOptions = Record<never, never>>(options: O = {} as O) {
      const mode = options.mode ?? 'required';
      const exclude = definedExclude(options.exclude, 'idempotency.procedure()');
      type Overrides = { idempotency: IdempotencyContextFor<O> };
      const pass = (idempotency: IdempotencyContext | BypassedIdempotency | undefined) =>
        ({ idempotency }) as Overrides;
      return experimental_standaloneMiddleware<{ ctx: Ctx; input: unknown }>().create(async (opts) => {
        type Result = Awaited<ReturnType<typeof opts.next<Overrides>>>;
        const ctx = opts.ctx as unknown as Ctx;
        const request = readKeyedRequest(config, access, ctx, mode);
        if (!request) return opts.next<Overrides>({ ctx: pass(undefined) });
        const input = await validatedInput(opts, 'idempotency.procedure()');
        const what = `The result of ${opts.path}`;
        let first: Result | undefined;
        let result;
        try {
          const fingerprints = fingerprintsOrBadRequest(opts.path, input, exclude);
          const call = { ledger: config.ledger, request, fingerprints, name: opts.path, noun: 'procedure', options, report: errorReport(config, opts.path, request) } as const;
          result = await runKeyed(
            call,
            async (idempotency) => {
              first = await opts.next<Overrides>({ ctx: pass(idempotency) });
              if (!first.ok) throw forTheLedger(first.error);
              return first.data;
            },
            {
              // undefined (a resolver that returns nothing) is stored as '' and replayed as undefined.
              serialize: (data) => encodeValue(transformer.serialize(data), what),
              code: 200,
              storeError: (error) => (error instanceof TRPCError ? storedTrpcError(error) : undefined),
            },
          );
        } catch (error) {
          // An unexpected error (tRPC wrapped it: its message is the thrown one) answers an error id, not its text.
          if (error instanceof TRPCError && isWrappedUnexpected(error)) throw internalServerError(error.cause, errorReport(config, opts.path, request));
          throw forTrpc(error, access, ctx);
        }
        switch (result.state) {
          case 'bypassed':
            return opts.next<Overrides>({ ctx: pass({ ...request, bypassed: true }) });
          case 'executed':
            faultPoint('trpc.before-response', opts.path);
            // A stored error: deliberate (a 4xx or non-retryable one), answered as it is.
            if (!result.ok) throw result.error;
            return first!;
          case 'replay': {
            markReplayed(access, ctx);
            if (!result.outcome.ok) throw trpcErrorFromStored(JSON.parse(result.outcome.body));
            const stored = decodeValue(result.outcome.body, undefined, what);
            return replayResult<Result>(ctx, stored === undefined ? undefined : transformer.deserialize(stored));
          }
        }
      });
    },
  };
}

/**
 * What the ledger is handed for a failed resolver. tRPC wraps whatever the
 * resolver threw in a TRPCError; a dropped connection inside it is unwrapped,
 * so that the ledger sees Postgres's failure (answered 503, key released)
 * rather than an opaque 500.
 */
function forTheLedger(error: TRPCError): unknown {
  const { cause } = error;
  if (error.code === 'INTERNAL_SERVER_ERROR' && (isConnectionError(cause) || isStepkeyError(cause, 'database_unavailable'))) return cause;
  return toTrpcError(error);
}
