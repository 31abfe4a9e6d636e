/**
 * stepkey/dashboard: the operator's web dashboard, as a handler to mount in
 * your own server (Node or fetch style) — `stepkey dashboard` serves the
 * same on its own.
 *
 *   const dashboard = createDashboard({ database, token: process.env.STEPKEY_DASHBOARD_TOKEN, basePath: '/ops' });
 *   app.use('/ops', dashboard.node);                          // Express
 *   app.all('/ops/*', (c) => dashboard.fetch(c.req.raw));     // Hono
 */
export { createDashboard, type Dashboard, type DashboardOptions } from './dashboard.js';
export type { DashboardRequest, DashboardResponse } from './http.js';
export type { NodeHandler } from './node-adapter.js';
export type { FetchHandler } from './fetch-adapter.js';
export type * from './api-types.js';
