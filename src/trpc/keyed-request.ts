/**
 * What every keyed call goes through before anything is claimed — one
 * well-formed key, not in a batch of several operations, from an identified
 * caller, with an input to fingerprint — and the answers that
 * idempotent procedures, workflow procedures and createWorkflowRouter share.
 */
import { TRPCError } from '@trpc/server';
import { legacyPurposeFingerprint, purposeFingerprint } from '../keys/fingerprint.js';
import { instrument } from '../telemetry/instrumentation.js';
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

/** A keyed call's fingerprint (v2: the input as sent), and its v1 form for rows stored before v2. */
export interface RequestFingerprints {
  fingerprint: string;
  legacyFingerprint: () => string;
}

/**
 * The fingerprints of a call: over the raw input (before the schema's
 * defaults, so a deploy that adds a defaulted field keeps retries identical)
 * and, lazily, the legacy one over the validated input. An input that cannot
 * be fingerprinted is a 400.
 */
export function fingerprintsOrBadRequest(
  path: string,
  input: { raw: unknown; validated: unknown },
  exclude: string[] | undefined,
): RequestFingerprints {
  const options = exclude ? { exclude } : {};
  try {
    return {
      fingerprint: purposeFingerprint(path, input.raw, options),
      legacyFingerprint: () => legacyPurposeFingerprint(path, input.validated, options),
    };
  } catch (error) {
    throw new TRPCError({ code: 'BAD_REQUEST', message: (error as Error).message, cause: error });
  }
}

/** Marks the answer a replay of the stored outcome. */
export function markReplayed<Ctx>(access: RequestAccess<Ctx>, ctx: Ctx, via: 'procedure' | 'workflow'): void {
  instrument.replayed(via);
  access.setHeader(ctx, 'Idempotent-Replayed', 'true');
}

/** 409 with Retry-After: another attempt with this key is still working. */
export function inProgress<Ctx>(access: RequestAccess<Ctx>, ctx: Ctx, retryAfterMs: number): TRPCError {
  instrument.answered(409);
  const seconds = retryAfterSeconds(retryAfterMs);
  access.setHeader(ctx, 'Retry-After', seconds);
  return new TRPCError({
    code: 'CONFLICT',
    message: `A request with this ${IDEMPOTENCY_KEY_HEADER} is still in progress; retry after ${seconds} s.`,
  });
}

/** What a key was first used for, as the ledger row records it. */
export interface KeyUse {
  kind: string;
  name: string | null;
}

/**
 * 422: the key already names another operation. The answer says which: a
 * procedure or workflow of another name, or the same one with other input
 * (for a workflow, the same workflow reached through another procedure looks
 * the same).
 */
export function mismatch(existing: KeyUse, current: { kind: 'request' | 'run'; name: string }): TRPCError {
  const what = (use: KeyUse) => `${use.kind === 'run' ? 'workflow' : 'procedure'} ${use.name ?? '(unnamed)'}`;
  const other = existing.kind !== current.kind || existing.name !== current.name;
  instrument.answered(422);
  const message = other
    ? `This ${IDEMPOTENCY_KEY_HEADER} was already used for another operation, ${what(existing)}; a key names one operation: use a new key for ${current.name}.`
    : `This ${IDEMPOTENCY_KEY_HEADER} was already used for ${what(current)} with different input${current.kind === 'run' ? ' (or through another procedure)' : ''}; a key names one request: use a new key for a changed request.`;
  return new TRPCError({ code: 'UNPROCESSABLE_CONTENT', message });
}
