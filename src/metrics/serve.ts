/**
 * A /metrics server of its own, for a process that has no HTTP server (a
 * worker): bound to 127.0.0.1 unless told otherwise, answering /metrics
 * only.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { metricsHandler } from './handler.js';

export interface MetricsServer {
  readonly url: string;
  close(): Promise<void>;
}

export async function serveMetrics(options: { port?: number; host?: string } = {}): Promise<MetricsServer> {
  const handler = metricsHandler();
  const server = createServer((req, res) => {
    if (req.method === 'GET' && (req.url === '/metrics' || req.url?.startsWith('/metrics?'))) return handler.node(req, res);
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('stepkey serves /metrics here\n');
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  server.unref();
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
