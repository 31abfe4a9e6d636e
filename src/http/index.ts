/**
 * stepkey/http: the Idempotency-Key semantics of the tRPC option for any HTTP
 * server, with no framework dependency — one core (src/idempotency/) with the
 * tRPC option, the same answers:
 *
 *   createFetchIdempotency   `(request: Request, context?) => Promise<Response>`:
 *                            Hono, Next.js route handlers, Bun, Deno
 *   createNodeIdempotency    `(req, res, next)`: Express, Connect, node:http
 *
 * Each gives `handler(options, fn)` — an idempotent handler whose writes
 * commit with its stored answer — and `workflow(w, options)` — a route that
 * starts a run under the caller's key and answers its result.
 */
export { createFetchIdempotency, type FetchHandler, type FetchIdempotencyConfig } from './fetch.js';
export { createNodeIdempotency, type NodeHandler, type NodeIdempotencyConfig } from './node.js';
export type { HandlerCall, HandlerCallFor, HandlerOptions } from './keyed-handler.js';
export type { CompletedRun, WorkflowRouteOptions } from './workflow-route.js';
export { STORED_HEADERS, type HandlerAnswer } from './answer.js';
export type { RequestBody } from './request-body.js';
export { DEFAULT_KEYED_METHODS, DEFAULT_MAX_BODY_BYTES, type HttpIdempotencySetup, type RouteOptions } from './exchange.js';
export { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey, type ParsedKey } from '../idempotency/header.js';
export type { BypassedIdempotency, IdempotencyContext, IdempotencyContextFor, KeyedCallOptions } from '../idempotency/options.js';
export type { WaitingAnswer } from '../idempotency/waiting-answer.js';
