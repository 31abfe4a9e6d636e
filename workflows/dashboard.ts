/**
 * The shop's dashboard process: stepkey/dashboard (runs, keys, outbox,
 * workers, /metrics) on DASHBOARD_PORT, bound to 127.0.0.1. It builds the
 * dashboard's browser app first when dist/ has none (a published package
 * ships it built). Actions need STEPKEY_DASHBOARD_TOKEN; without one, a
 * token is made for this run and printed.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { connect } from 'stepkey';
import { createDashboard } from 'stepkey/dashboard';
import { checkout } from './checkout.js';
import { databaseUrl } from './config.js';
import { onStop } from './lib/service.js';
import { projectRoot } from './supervisor/paths.js';

if (!existsSync(join(projectRoot, 'dist', 'dashboard-ui', 'index.html'))) {
  console.log("building the dashboard's browser app (dist/dashboard-ui)");
  const { build } = await import('vite');
  await build({ configFile: join(projectRoot, 'vite.dashboard.config.ts'), logLevel: 'warn' });
}

const token = process.env.STEPKEY_DASHBOARD_TOKEN || randomBytes(18).toString('base64url');
const database = connect(databaseUrl(), { max: 4, applicationName: 'shop-dashboard' });
// Bound to 127.0.0.1: anyone on this machine reads; actions need the token.
const dashboard = createDashboard({ database, token, publicRead: true, workflows: [checkout] });
const server = createServer(dashboard.node);

server.listen(Number(process.env.DASHBOARD_PORT ?? 4000), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  console.log(`LISTENING http://127.0.0.1:${port}/ token=${token}`);
});

onStop(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await dashboard.close();
  await database.close();
});
