/**
 * The order API process: tRPC over HTTP on PORT, at /trpc, stepkey's metrics at /metrics, and a
 * liveness route at /health (200 while the process serves requests; it does not read the database,
 * so an outage of Postgres — answered 503 by the API itself — does not get the API restarted).
 */
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:http';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { connect, createEngine } from 'stepkey';
import { metricsHandler } from 'stepkey/metrics';
import { checkout } from '../checkout.js';
import { config, databaseUrl } from '../config.js';
import { onStop } from '../lib/service.js';
import { createContext } from './context.js';
import { createApiRouter } from './router.js';

const database = connect(databaseUrl(), { max: 20, applicationName: 'shop-api' });
const engine = createEngine({ database, workflows: [checkout] });
const trpc = createHTTPHandler({ router: createApiRouter(database, engine), basePath: '/trpc/', createContext });
// stepkey's counters that live here (replays, 409/422/503 answers, runs started) are served next to the API.
const metrics = metricsHandler();
const server = createServer((req, res) => {
  if (req.url === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    return;
  }
  return req.url === '/metrics' ? metrics.node(req, res) : trpc(req, res);
});

server.listen(config.port, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  console.log(`LISTENING http://127.0.0.1:${port}/trpc`);
});

onStop(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await engine.shutdown();
  await database.close();
});
