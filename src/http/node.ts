/**
 * stepkey/http for Node's `(req, res, next)`: Express and Connect
 * (`app.post('/v1/charges', idempotency.handler(...))`), and node:http
 * itself (`createServer(idempotency.handler(...))`, without `next`).
 *
 * The handler reads the raw body itself (or the JSON value express.json()
 * parsed: node-body.ts), answers every request with a keyed method, and
 * passes any other method on to `next()` — or, without one, answers 405
 * naming the keyed methods.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Workflow } from '../workflow/define.js';
import type { HandlerAnswer, WireAnswer } from './answer.js';
import { DEFAULT_MAX_BODY_BYTES, definedRoute, type Exchange, type HttpIdempotencySetup } from './exchange.js';
import { answerKeyed, type HandlerCallFor, type HandlerOptions } from './keyed-handler.js';
import { readNodeBody } from './node-body.js';
import { problem } from './problem.js';
import { answerWorkflow, type WorkflowRouteOptions } from './workflow-route.js';

export interface NodeIdempotencyConfig<Req extends IncomingMessage, Res extends ServerResponse> extends HttpIdempotencySetup {
  /** The caller's identity — the authenticated tenant — from the request (or res.locals): keys are scoped by it. null/undefined: anonymous. */
  scope: (req: Req, res: Res) => string | null | undefined;
}

/** A Node request handler, and an Express/Connect middleware. */
export type NodeHandler<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse> = (
  req: Req,
  res: Res,
  next?: (error?: unknown) => void,
) => void;

/** Every line of a header as received: Node joins repeated lines in req.headers, rawHeaders keeps them apart. */
function headerLines(req: IncomingMessage, name: string): string[] {
  const lower = name.toLowerCase();
  const values: string[] = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.toLowerCase() === lower) values.push(req.rawHeaders[i + 1]!);
  return values;
}

function write(res: ServerResponse, answer: WireAnswer, next: ((error?: unknown) => void) | undefined): void {
  if (res.headersSent) {
    const error = new Error('stepkey/http: the response was already sent by something else before the idempotent handler answered.');
    if (next) next(error);
    else res.destroy(error);
    return;
  }
  res.statusCode = answer.status;
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.setHeader('content-length', String(answer.body.byteLength));
  res.end(answer.body);
}

export function createNodeIdempotency<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  config: NodeIdempotencyConfig<Req, Res>,
) {
  const maxBodyBytes = config.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  const exchangeOf = (req: Req, res: Res): Exchange => {
    const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? '/';
    return {
      method: (req.method ?? 'GET').toUpperCase(),
      pathname: new URL(url, 'http://localhost').pathname,
      header: (name) => headerLines(req, name),
      scope: () => config.scope(req, res),
      body: () => readNodeBody(req, maxBodyBytes),
    };
  };

  const serve = (methods: Set<string>, answer: (exchange: Exchange, req: Req) => Promise<WireAnswer>): NodeHandler<Req, Res> => {
    return (req, res, next) => {
      const exchange = exchangeOf(req, res);
      if (!methods.has(exchange.method)) {
        if (next) return next();
        const allow = [...methods].join(', ');
        return write(res, { ...problem(405, `This route is keyed for ${allow} only.`), headers: { 'content-type': 'application/problem+json', allow } }, next);
      }
      answer(exchange, req).then(
        (wire) => write(res, wire, next),
        (error: unknown) => (next ? next(error) : res.destroy(error as Error)),
      );
    };
  };

  return {
    config,
    /**
     * An idempotent handler: it runs once per key, its writes through
     * `call.idempotency.sql`/`.db` commit with the answer it returns, and a
     * repeat gets that answer again, byte for byte.
     */
    handler<O extends HandlerOptions = Record<never, never>>(
      options: O,
      handler: (req: Req, call: HandlerCallFor<O>) => Promise<HandlerAnswer> | HandlerAnswer,
    ): NodeHandler<Req, Res> {
      const route = definedRoute(options, `handler ${options.route ?? ''}`.trimEnd());
      return serve(route.methods, (exchange, req) => answerKeyed(config, route.options, exchange, (call) => handler(req, call)));
    },
    /** A workflow route: starts the run under the caller's key and answers its result (202 while it waits). */
    workflow<W extends Workflow>(workflow: W, options: WorkflowRouteOptions<Req, W> = {}): NodeHandler<Req, Res> {
      const { engine } = config;
      if (!engine) throw new StepkeyError('definition_error', `createNodeIdempotency({ engine }) is needed for the workflow route of ${workflow.name}.`);
      engine.registry.require(workflow);
      const route = definedRoute(options, `workflow route of ${workflow.name}`);
      return serve(route.methods, (exchange, req) => answerWorkflow({ ...config, engine }, workflow, route.options, exchange, () => req));
    },
  };
}
