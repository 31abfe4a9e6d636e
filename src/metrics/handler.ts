/**
 * Serving the registry at /metrics, in the app's own server: a Node
 * request listener (Express, Fastify's raw request, node:http) and a
 * fetch-style handler (Hono, Next route handlers, Bun, Deno).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { registry as stepkeyRegistry } from './registry.js';

export interface MetricsHandler {
  /** Node: answers any request it is given with the metrics. */
  node(req: IncomingMessage, res: ServerResponse): void;
  fetch(request?: Request): Promise<Response>;
}

export function metricsHandler(registries: readonly Registry[] = [stepkeyRegistry]): MetricsHandler {
  const render = async () => {
    const texts = await Promise.all(registries.map((registry) => registry.metrics()));
    return { body: texts.join('\n'), type: registries[0]?.contentType ?? 'text/plain; version=0.0.4; charset=utf-8' };
  };
  return {
    node(_req, res) {
      render().then(
        ({ body, type }) => {
          res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' });
          res.end(body);
        },
        (error: unknown) => {
          res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
          res.end(`metrics failed: ${error instanceof Error ? error.message : String(error)}\n`);
        },
      );
    },
    async fetch() {
      try {
        const { body, type } = await render();
        return new Response(body, { status: 200, headers: { 'content-type': type, 'cache-control': 'no-store' } });
      } catch (error) {
        return new Response(`metrics failed: ${error instanceof Error ? error.message : String(error)}\n`, { status: 500 });
      }
    },
  };
}
