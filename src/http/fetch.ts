/**
 * stepkey/http for fetch-style servers, `(request: Request, context?) =>
 * Promise<Response>`: Hono (`app.post('/v1/charges', (c) => charge(c.req.raw, c))`),
 * Next.js route handlers (`export const POST = charge`), Bun, Deno.
 *
 * `context` is whatever the server passes beside the request (Hono's `c`,
 * Next's `{ params }`): the scope function and the handler get it. The
 * handler is handed a Request whose body can be read again (its bytes are
 * also in `call.body`). A request with a method that is not keyed is answered
 * 405, naming the keyed methods.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Workflow } from '../workflow/define.js';
import type { HandlerAnswer, WireAnswer } from './answer.js';
import { DEFAULT_MAX_BODY_BYTES, definedRoute, type Exchange, type HttpIdempotencySetup } from './exchange.js';
import { answerKeyed, type HandlerCallFor, type HandlerOptions } from './keyed-handler.js';
import { tooLarge } from './node-body.js';
import { problem } from './problem.js';
import { bodyFromBytes, type RequestBody } from './request-body.js';
import { answerWorkflow, type WorkflowRouteOptions } from './workflow-route.js';

export interface FetchIdempotencyConfig<C> extends HttpIdempotencySetup {
  /** The caller's identity — the authenticated tenant — from the request (and the server's context): keys are scoped by it. */
  scope: (request: Request, context: C | undefined) => string | null | undefined | Promise<string | null | undefined>;
}

export type FetchHandler<C> = (request: Request, context?: C) => Promise<Response>;

async function readBody(request: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  if (!request.body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw tooLarge(maxBytes);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

function response(answer: WireAnswer): Response {
  const body = answer.body.byteLength === 0 ? null : (answer.body as Uint8Array<ArrayBuffer>);
  return new Response(body, { status: answer.status, headers: answer.headers });
}

export function createFetchIdempotency<C = unknown>(config: FetchIdempotencyConfig<C>) {
  const maxBodyBytes = config.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  /** The exchange of a request, and the request the handler is given, its body readable again. */
  const exchangeOf = async (request: Request, context: C | undefined) => {
    const url = new URL(request.url);
    // Read before the key is, so that the exchange's scope() can answer at once; a failure is thrown there.
    let scope: { value: string | null | undefined } | { error: unknown };
    try {
      scope = { value: await config.scope(request, context) };
    } catch (error) {
      scope = { error };
    }
    let read: { body: RequestBody; request: Request } | undefined;
    const readOnce = async () => {
      if (read) return read;
      const bytes = await readBody(request, maxBodyBytes);
      const again = new Request(request.url, {
        method: request.method,
        headers: request.headers,
        body: bytes.byteLength === 0 ? null : (bytes as Uint8Array<ArrayBuffer>),
        signal: request.signal,
      });
      read = { body: bodyFromBytes(bytes, request.headers.get('content-type')), request: again };
      return read;
    };
    const exchange: Exchange = {
      method: request.method.toUpperCase(),
      pathname: url.pathname,
      // Headers joins repeated lines with ", ", which the key's parser refuses as several keys.
      header: (name) => {
        const value = request.headers.get(name);
        return value === null ? [] : [value];
      },
      scope: () => {
        if ('error' in scope) throw scope.error;
        return scope.value;
      },
      body: async () => (await readOnce()).body,
    };
    return { exchange, handlerRequest: async () => (await readOnce()).request };
  };

  const serve = (
    methods: Set<string>,
    answer: (exchange: Exchange, handlerRequest: () => Promise<Request>, context: C | undefined) => Promise<WireAnswer>,
  ): FetchHandler<C> => {
    return async (request, context) => {
      if (!methods.has(request.method.toUpperCase())) {
        const allow = [...methods].join(', ');
        const refused = problem(405, `This route is keyed for ${allow} only.`);
        return response({ ...refused, headers: { ...refused.headers, allow } });
      }
      const { exchange, handlerRequest } = await exchangeOf(request, context);
      return response(await answer(exchange, handlerRequest, context));
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
      handler: (request: Request, call: HandlerCallFor<O> & { context: C | undefined }) => Promise<HandlerAnswer> | HandlerAnswer,
    ): FetchHandler<C> {
      const route = definedRoute(options, `handler ${options.route ?? ''}`.trimEnd());
      return serve(route.methods, (exchange, handlerRequest, context) =>
        answerKeyed(config, route.options, exchange, async (call) => handler(await handlerRequest(), { ...call, context })),
      );
    },
    /** A workflow route: starts the run under the caller's key and answers its result (202 while it waits). */
    workflow<W extends Workflow>(workflow: W, options: WorkflowRouteOptions<Request, W> = {}): FetchHandler<C> {
      const { engine } = config;
      if (!engine) throw new StepkeyError('definition_error', `createFetchIdempotency({ engine }) is needed for the workflow route of ${workflow.name}.`);
      engine.registry.require(workflow);
      const route = definedRoute(options, `workflow route of ${workflow.name}`);
      return serve(route.methods, (exchange, handlerRequest) => answerWorkflow({ ...config, engine }, workflow, route.options, exchange, handlerRequest));
    },
  };
}
