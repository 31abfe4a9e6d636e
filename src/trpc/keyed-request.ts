/**
 * The tRPC side of a keyed call: the core's checks (idempotency/keyed-request.ts)
 * read from a tRPC context, the core's refusals as TRPCErrors with their
 * headers set on the response, and the one check that only tRPC needs —
 * that the middleware sees the validated input.
 */
import { TRPCError } from '@trpc/server';
import type { TRPC_ERROR_CODE_KEY } from '@trpc/server/rpc';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency/header.js';
import { readKeyedRequest as readKey, type KeyedRequest } from '../idempotency/keyed-request.js';
import { isRefusal, type Refusal } from '../idempotency/refusal.js';
import type { IdempotencyConfig } from './idempotency.js';
import type { RequestAccess } from './request-access.js';

export type { KeyedRequest } from '../idempotency/keyed-request.js';
export { retryAfterSeconds } from '../idempotency/refusal.js';

const trpcCodeByStatus: Partial<Record<number, TRPC_ERROR_CODE_KEY>> = {
  400: 'BAD_REQUEST',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  412: 'PRECONDITION_FAILED',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  422: 'UNPROCESSABLE_CONTENT',
  429: 'TOO_MANY_REQUESTS',
  500: 'INTERNAL_SERVER_ERROR',
  502: 'BAD_GATEWAY',
  503: 'SERVICE_UNAVAILABLE',
  504: 'GATEWAY_TIMEOUT',
};

/** A refusal as tRPC answers it: its headers on the response, its status as the TRPCError's code. */
export function trpcError<Ctx>(refusal: Refusal, access: RequestAccess<Ctx>, ctx: Ctx): TRPCError {
  for (const [name, value] of Object.entries(refusal.headers)) access.setHeader(ctx, name, value);
  return new TRPCError({
    code: trpcCodeByStatus[refusal.status] ?? 'INTERNAL_SERVER_ERROR',
    message: refusal.message,
    cause: refusal.cause ?? refusal,
  });
}

/** Any error on its way out of a keyed procedure: a refusal as a TRPCError, anything else as it is. */
export function forTrpc<Ctx>(error: unknown, access: RequestAccess<Ctx>, ctx: Ctx): unknown {
  return isRefusal(error) ? trpcError(error, access, ctx) : error;
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
  try {
    return readKey({
      headerValues: access.header(ctx, IDEMPOTENCY_KEY_HEADER),
      operations: access.operations(ctx),
      scope: () => config.scope(ctx),
      mode,
    });
  } catch (error) {
    throw forTrpc(error, access, ctx);
  }
}

/** The part of a middleware's options that tells validated input from raw input. */
export interface MiddlewareInput {
  path: string;
  input: unknown;
  getRawInput: () => Promise<unknown>;
}

/**
 * The validated input, to fingerprint. A middleware placed before `.input()`
 * sees no validated input while the request carries one: its fingerprint
 * would cover the path alone, and a changed payload would replay the old
 * answer. That is a wiring mistake, refused with a 500 that says how to fix it
 * before anything is claimed.
 */
export async function validatedInput(opts: MiddlewareInput, middleware: string): Promise<{ raw: unknown; validated: unknown }> {
  const raw = await opts.getRawInput();
  if (opts.input === undefined && raw !== undefined) {
    throw new TRPCError({
      code: 'INTERNAL_SERVER_ERROR',
      message:
        `${opts.path} is misconfigured: its ${middleware} middleware runs before the input is validated, so the ` +
        `${IDEMPOTENCY_KEY_HEADER} fingerprint could not cover the input. Put the idempotency middleware after .input(schema), ` +
        `e.g. t.procedure.input(schema).use(${middleware}). (A procedure without .input() takes no input.)`,
    });
  }
  return { raw, validated: opts.input };
}

/** Marks the answer a replay of the stored outcome. */
export function markReplayed<Ctx>(access: RequestAccess<Ctx>, ctx: Ctx): void {
  access.setHeader(ctx, 'Idempotent-Replayed', 'true');
}
