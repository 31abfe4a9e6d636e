/** The order API process: tRPC over HTTP on PORT, at /trpc. */
import type { AddressInfo } from 'node:net';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { connect } from '../../src/db/connect.js';
import { createEngine } from '../../src/workflow/engine.js';
import { checkout } from '../checkout.js';
import { config, databaseUrl } from '../config.js';
import { onStop } from '../lib/service.js';
import { createContext } from './context.js';
import { createApiRouter } from './router.js';

const database = connect(databaseUrl(), { max: 20, applicationName: 'shop-api' });
const engine = createEngine({ database, workflows: [checkout] });
const server = createHTTPServer({ router: createApiRouter(database, engine), basePath: '/trpc/', createContext });

server.listen(config.port, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  console.log(`LISTENING http://127.0.0.1:${port}/trpc`);
});

onStop(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await engine.shutdown();
  await database.close();
});
