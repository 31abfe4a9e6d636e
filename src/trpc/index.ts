/**
 * stepkey/trpc: idempotent tRPC procedures and workflow procedures (server).
 * The client link has an entry point of its own, stepkey/trpc/client, which
 * loads nothing of the server.
 */
export {
  createIdempotency,
  type BypassedIdempotency,
  type IdempotencyConfig,
  type IdempotencyContext,
  type IdempotencyContextFor,
  type ProcedureIdempotencyOptions,
} from './idempotency.js';
export { retryAfterSeconds } from './keyed-request.js';
export {
  answersWaiting,
  waitingAnswer,
  type RunContextForResolver,
  type WaitingAnswer,
  type WorkflowProcedureOptions,
} from './workflow-procedure.js';
export {
  createWorkflowRouter,
  type BaseProcedure,
  type RunStatusView,
  type StartedRun,
  type WorkflowProcedures,
  type WorkflowRouterOptions,
} from './workflow-router.js';
export { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey, type ParsedKey } from '../idempotency/header.js';
export { defaultRequestAccess, type RequestAccess } from './request-access.js';
export { storedTrpcError, toTrpcError, trpcErrorFromStored } from './error-policy.js';
export { toServiceError } from './service-error.js';
export type { DataTransformerLike, TransformerOption } from './transformer.js';
