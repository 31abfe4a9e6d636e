/**
 * The one mapping from a StepkeyError to the TRPCError a tRPC caller gets —
 * the core's (idempotency/service-failure.ts: status, Retry-After, a public
 * message, an error id for internal failures), thrown the tRPC way.
 * Idempotent procedures, workflow procedures and createWorkflowRouter all
 * answer through it; stepkey/http answers through the same core.
 */
import type { TRPCError } from '@trpc/server';
import type { StepkeyError } from '../errors/stepkey-error.js';
import type { ErrorReport } from '../idempotency/internal-failure.js';
import { refusalOf } from '../idempotency/service-failure.js';
import { trpcError } from './keyed-request.js';
import type { RequestAccess } from './request-access.js';

/**
 * The TRPCError for a StepkeyError; sets Retry-After on the response when the
 * same call may succeed later. `report` says where it happened (and which
 * logger to use) for the log line of an internal failure.
 */
export function toServiceError<Ctx>(error: StepkeyError, access: RequestAccess<Ctx>, ctx: Ctx, report?: ErrorReport): TRPCError {
  return trpcError(refusalOf(error, report), access, ctx);
}
