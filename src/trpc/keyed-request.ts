/**
 * What every keyed call goes through before anything is claimed — one
 * well-formed key, not in a batch of several operations, from an identified
 * caller, with a validated input to fingerprint — and the answers that
 * idempotent procedures, workflow procedures and createWorkflowRouter share.
 */
import { TRPCError } from '@trpc/server';
import { purposeFingerprint } from '../keys/fingerprint.js';
import { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey } from './header.js';
import type { IdempotencyConfig } from './idempotency.js';
import type { RequestAccess } from './request-access.js';

export interface KeyedRequest {
  key: string;
  scope: string;
}

/** Seconds for Retry-After: at least 1. */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
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
  const operations = access.operations(ctx);
  if (values.length > 0 && operations > 1) {
    throw new TRPCError({
      code: 'BAD_REQUEST',
      message: `This batched request carries one ${IDEMPOTENCY_KEY_HEADER} for ${operations} operations; send each keyed mutation in a request of its own.`,
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
export async function validatedInput(opts: MiddlewareInput, middleware: string): Promise<unknown> {
  if (opts.input === undefined && (await opts.getRawInput()) !== undefined) {
    throw new TRPCError({
      code: 'INTERNAL_SERVER_ERROR',
      message:
        `${opts.path} is misconfigured: its ${middleware} middleware runs before the input is validated, so the ` +
        `${IDEMPOTENCY_KEY_HEADER} fingerprint could not cover the input. Put the idempotency middleware after .input(schema), ` +
        `e.g. t.procedure.input(schema).use(${middleware}). (A procedure without .input() takes no input.)`,
    });
  }
  return opts.input;
}

export function fingerprintOrBadRequest(path: string, input: unknown, exclude: string[] | undefined): string {
  try {
    return purposeFingerprint(path, input, exclude ? { exclude } : {});
  } catch (error) {
    throw new TRPCError({ code: 'BAD_REQUEST', message: (error as Error).message, cause: error });
  }
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

/** 422: the key already names another operation (another procedure, or another input). */
export function mismatch(existingName: string | null): TRPCError {
  return new TRPCError({
    code: 'UNPROCESSABLE_CONTENT',
    message: `This ${IDEMPOTENCY_KEY_HEADER} was already used for another request (${existingName ?? 'unknown'} with different input); a key names one operation.`,
  });
}
