/**
 * One HTTP request as stepkey/http's core sees it, whatever server carried it
 * (a fetch-style Request, Node's IncomingMessage): its method, path, header
 * lines, caller and body. The adapters (fetch.ts, node.ts) build one per
 * request; keyed-handler.ts and workflow-route.ts answer it.
 */
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log/logger.js';
import type { Engine } from '../engine/engine.js';
import type { RequestBody } from './request-body.js';
import { definedExclude } from '../idempotency/fingerprints.js';

export interface Exchange {
  /** Upper case. */
  method: string;
  pathname: string;
  /** Every line of a request header as received. */
  header(name: string): string[];
  /** The caller's scope (the authenticated tenant); null or undefined for an anonymous caller. */
  scope(): string | null | undefined;
  /** The body, read once: a refusal (400, 413, 500) when it cannot be. */
  body(): Promise<RequestBody>;
}

/** What every stepkey/http factory is configured with, besides how to find the caller. */
export interface HttpIdempotencySetup {
  ledger: Ledger;
  /** Needed for workflow routes. */
  engine?: Engine;
  /**
   * Where an internal failure's full error is logged with the error id its 500
   * names (event `http.internal_error`): a pino logger or one with its
   * methods, false for none (default: pino if installed).
   */
  logger?: Logger | false;
  /** The largest body read, in bytes (default 1 MiB); a larger one is 413, before anything is claimed. */
  maxBodyBytes?: number;
}

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/** The methods keyed unless a route says otherwise. */
export const DEFAULT_KEYED_METHODS: readonly string[] = Object.freeze(['POST', 'PATCH']);

/** What a route is called in its fingerprint, its ledger row and its answers. */
export interface RouteOptions {
  /** Default: the method and the path, e.g. `POST /v1/charges`. */
  route?: string;
  /** The methods that are keyed (default POST and PATCH); any other is passed on (Node) or answered 405 (fetch). */
  methods?: readonly string[];
}

/** The route's name for this request. */
export function routeName(options: RouteOptions, exchange: Pick<Exchange, 'method' | 'pathname'>): string {
  return options.route ?? `${exchange.method} ${exchange.pathname}`;
}

/**
 * A route's options, checked once when it is defined: its keyed methods (upper
 * case) and its excluded JSON fields (a bad one is a definition_error).
 */
export function definedRoute<O extends RouteOptions & { exclude?: string[] }>(options: O, what: string): { methods: Set<string>; options: O } {
  const exclude = definedExclude(options.exclude, `stepkey/http ${what}`);
  return { methods: keyedMethods(options), options: exclude === undefined ? options : { ...options, exclude } };
}

/** The route's keyed methods, upper case. */
function keyedMethods(options: RouteOptions): Set<string> {
  const methods = options.methods ?? DEFAULT_KEYED_METHODS;
  if (!Array.isArray(methods) || methods.length === 0 || methods.some((method) => typeof method !== 'string' || !/^[A-Za-z]+$/.test(method))) {
    throw new TypeError(`stepkey/http: { methods } must be a non-empty list of HTTP method names, got ${JSON.stringify(methods)}.`);
  }
  return new Set(methods.map((method) => method.toUpperCase()));
}
