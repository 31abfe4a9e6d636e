/**
 * stepkey/http's two adapters served side by side for a test: Node handlers
 * by path on node:http, fetch handlers by path on @hono/node-server (without
 * Hono), each on a free port of 127.0.0.1.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';

type NodeRoute = (req: IncomingMessage, res: ServerResponse) => unknown;
type FetchRoute = (request: Request) => Response | Promise<Response>;

export interface AdapterServers {
  bases: Record<'node' | 'fetch', string>;
  /** Closes both servers and their connections. */
  close(): void;
}

const baseOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

export async function serveAdapters(nodeRoutes: Record<string, NodeRoute>, fetchRoutes: Record<string, FetchRoute>): Promise<AdapterServers> {
  const nodeServer = createServer((req, res) => nodeRoutes[new URL(req.url!, 'http://x').pathname]?.(req, res));
  await new Promise<void>((resolve) => nodeServer.listen(0, '127.0.0.1', resolve));
  const fetchServer = serve({ fetch: (request: Request) => fetchRoutes[new URL(request.url).pathname]!(request), port: 0, hostname: '127.0.0.1' }) as Server;
  await new Promise<void>((resolve) => (fetchServer.listening ? resolve() : fetchServer.once('listening', () => resolve())));
  return {
    bases: { node: baseOf(nodeServer), fetch: baseOf(fetchServer) },
    close() {
      for (const server of [nodeServer, fetchServer]) server.closeAllConnections(), server.close();
    },
  };
}
