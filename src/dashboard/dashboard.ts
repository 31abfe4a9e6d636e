/**
 * The dashboard: a request handler over the read models and the actions,
 * mounted in the app's own server (Node or fetch style) or served by
 * `stepkey dashboard`. It reads and changes state only; it never executes
 * a workflow — a resumed run is made due, and a worker's sweeper runs it.
 *
 *   GET  /                     the browser app (hash routes: #/runs, #/run, #/key, #/outbox, #/queues, #/workers)
 *   GET  /assets/…             its files
 *   GET  /api/session          who may do what, the status table, the CSRF token
 *   GET  /api/stats            the shared poll's probes and view reads so far
 *   GET  /api/{runs,summary,run,key,jobs,queues,workers}?…&since=V   a view, from the shared poll's cache
 *   POST /api/session          sign in with the token;  POST /api/session/end  sign out
 *   POST /api/actions/{cancel,resume,retry}   JSON body; token, CSRF header, same origin
 *   GET  /metrics              Prometheus metrics, when prom-client is installed; read like /api/*
 *
 * A dashboard that anyone may read answers only the Host names it is served
 * under (host-check.ts).
 */
import { connect, type Database } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { errorCode, isConnectionError, translateDatabaseError } from '../errors/pg-errors.js';
import { isStepkeyError } from '../errors/stepkey-error.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import { runStatusTable } from '../read/run-status.js';
import { jobStatuses } from '../read/sql/jobs.js';
import type { Workflow } from '../workflow/define.js';
import { runAction, signIn, signOut, type ActionDeps } from './action-routes.js';
import type { SessionView } from './api-types.js';
import { indexHtml, loadBundle, type Bundle } from './assets.js';
import { DashboardAuth } from './auth.js';
import { fetchHandler, type FetchHandler } from './fetch-adapter.js';
import { HostCheck, type AllowedHosts } from './host-check.js';
import { json, problem, type DashboardRequest, type DashboardResponse } from './http.js';
import { LiveViews, type LiveStats } from './live-views.js';
import { nodeHandler, type NodeHandler } from './node-adapter.js';
import { viewFor, type ViewDeps } from './views.js';

export interface DashboardOptions {
  /** A database from connect(), or a URL (the dashboard then owns a small pool). */
  database: Database | string;
  /** The access token: without one the dashboard is read-only. At least 16 characters. */
  token?: string | undefined;
  /** Whether reading needs no token (default: true without a token, false with one). */
  publicRead?: boolean;
  /** No actions at all, even with the token. */
  readOnly?: boolean;
  /**
   * The Host names it answers for while anyone may read it (no token, or
   * publicRead), beside localhost, 127.0.0.1 and [::1]: 'ops.example.com',
   * '.example.com' (it and every name under it), IP addresses. Any other Host
   * gets 403. `true`: any Host (behind a proxy that checks it).
   */
  allowedHosts?: AllowedHosts;
  /** Where the app mounts it, such as '/ops' (default '/'). */
  basePath?: string;
  /** How often the shared poll asks the database whether anything changed (default 1 000 ms). */
  pollMs?: number;
  /** The app's workflows: the key lookup then also lists declared steps a run has not recorded. */
  workflows?: readonly Workflow[];
  clock?: Clock;
  /** The workers' lease: a pool silent this long shows as silent (default 8 000). */
  deadAfterMs?: number;
  /** How long a cancelled run's key is kept (default 24 h). */
  retentionMs?: number;
  /** Who acts, for the audit log (default `dashboard@<remote address>`). */
  actor?: (request: DashboardRequest) => string;
  /** Serve /metrics (default true; needs prom-client). */
  metrics?: boolean;
  onError?: (error: unknown, context: string) => void;
}

export interface Dashboard {
  /** For node:http, Express, Fastify (raw). */
  readonly node: NodeHandler;
  /** For Hono, Next route handlers, anything with Request/Response. */
  readonly fetch: FetchHandler;
  handle(request: DashboardRequest): Promise<DashboardResponse>;
  /** Probes and view reads so far (each a read of the database). */
  readonly stats: LiveStats;
  close(): Promise<void>;
}

export function createDashboard(options: DashboardOptions): Dashboard {
  const database = typeof options.database === 'string' ? connect(options.database, { max: 4, applicationName: 'stepkey dashboard' }) : options.database;
  const owned = typeof options.database === 'string';
  const basePath = normaliseBase(options.basePath ?? '/');
  const clock = options.clock ?? systemClock;
  const onError = options.onError ?? ((error: unknown, context: string) => console.error(`stepkey dashboard: ${context}:`, error));
  const auth = new DashboardAuth({
    token: options.token,
    publicRead: options.publicRead ?? options.token === undefined,
    readOnly: options.readOnly ?? false,
    cookiePath: basePath,
  });
  const hosts = new HostCheck(options.allowedHosts, auth.publicRead);
  const pollMs = options.pollMs ?? 1_000;
  const live = new LiveViews(database.sql, clock, { pollMs, onError: (error) => onError(error, 'polling') });
  const viewDeps: ViewDeps = {
    q: database.sql,
    clock,
    workflows: options.workflows ?? [],
    deadAfterMs: options.deadAfterMs ?? 8_000,
    now: () => live.now(),
  };
  const actionDeps: ActionDeps = {
    database,
    clock,
    retentionMs: options.retentionMs ?? DEFAULT_RETENTION_MS,
    auth,
    actor: options.actor ?? ((request) => `dashboard@${request.remoteAddress || 'unknown'}`),
    changed: () => live.invalidate(),
  };
  let bundle: Bundle | undefined;
  let metrics: Promise<((request: Request) => Promise<Response>) | undefined> | undefined;

  const session = (request: DashboardRequest): SessionView => {
    const access = auth.access(request);
    return {
      canRead: access.canRead,
      canAct: access.canAct,
      signedIn: access.session !== undefined || access.bearer,
      readOnly: auth.readOnly,
      tokenConfigured: auth.tokenConfigured,
      csrf: access.session ? auth.csrfFor(access.session) : null,
      statuses: runStatusTable.map(({ name, label, tone, open, resumable, description }) => ({ name, label, tone, open, resumable, description })),
      jobStatuses: [...jobStatuses],
      pollMs,
    };
  };

  async function route(request: DashboardRequest): Promise<DashboardResponse> {
    const { method, path } = request;
    if (method === 'GET' && (path === '/' || path === '/index.html')) {
      bundle ??= loadBundle();
      if (!bundle) return problem(503, 'not_built', "The dashboard's browser app is not built: run `npm run build` (the published package ships it built).");
      return { status: 200, headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }, body: indexHtml(bundle, basePath) };
    }
    if (method === 'GET' && path.startsWith('/assets/')) {
      bundle ??= loadBundle();
      const file = bundle?.files.get(path.slice('/assets/'.length));
      if (!file) return problem(404, 'not_found', 'No such file.');
      return { status: 200, headers: { 'content-type': file.type, 'cache-control': 'public, max-age=31536000, immutable' }, body: file.body };
    }
    if (method === 'GET' && path === '/metrics' && options.metrics !== false) {
      if (!auth.access(request).canRead) return problem(401, 'sign_in', 'Metrics need the access token: send it as Authorization: Bearer <token>.');
      return serveMetrics();
    }
    if (path === '/api/session') {
      if (method === 'GET') return json(200, session(request));
      if (method === 'POST') return signIn(request, actionDeps);
    }
    const access = auth.access(request);
    if (path === '/api/session/end' && method === 'POST') return signOut(request, actionDeps, access);
    if (path.startsWith('/api/actions/')) {
      if (method !== 'POST') return problem(405, 'post_only', 'Actions are POST requests.', { allow: 'POST' });
      return runAction(path.slice('/api/actions/'.length), request, actionDeps, access);
    }
    if (path.startsWith('/api/') && method === 'GET') {
      if (!access.canRead) return problem(401, 'sign_in', 'This dashboard needs the access token to read: sign in.');
      // What this dashboard has cost the database: its probes and its reads of views.
      if (path === '/api/stats') return json(200, { ...live.stats, pollMs });
      const view = viewFor(path.slice('/api/'.length), request.query, viewDeps);
      if (!view) return problem(404, 'not_found', `There is no view '${path}'.`);
      const answer = await live.get(view.key, view.read);
      const since = request.query.get('since');
      return json(200, since === answer.version ? { version: answer.version, unchanged: true } : answer);
    }
    if (path.startsWith('/api/')) return problem(405, 'get_only', 'Views are GET requests.', { allow: 'GET' });
    return problem(404, 'not_found', 'Not a page of the dashboard.');
  }

  async function serveMetrics(): Promise<DashboardResponse> {
    metrics ??= import('../metrics/index.js').then(
      (loaded) => {
        loaded.collectDatabaseMetrics(database, { clock, deadAfterMs: viewDeps.deadAfterMs });
        const handler = loaded.metricsHandler();
        return (request: Request) => handler.fetch(request);
      },
      () => undefined,
    );
    const serve = await metrics;
    if (!serve) return problem(501, 'no_prom_client', 'Metrics need the prom-client package: npm install prom-client.');
    const response = await serve(new Request('http://dashboard.invalid/metrics'));
    return { status: response.status, headers: { 'content-type': response.headers.get('content-type') ?? 'text/plain' }, body: await response.text() };
  }

  async function handle(request: DashboardRequest): Promise<DashboardResponse> {
    try {
      return hosts.refuse(request) ?? (await route(request));
    } catch (caught) {
      const error = errorCode(caught) !== undefined || isConnectionError(caught) ? translateDatabaseError(caught, 'reading for the dashboard') : caught;
      if (isStepkeyError(error)) {
        if (error.httpStatus < 500) return problem(error.httpStatus, error.code, error.message);
        if (error.code === 'database_unavailable') return problem(503, error.code, 'The database is unavailable; the page retries.', { 'retry-after': '1' });
      }
      onError(error, `${request.method} ${request.path}`);
      return problem(500, 'internal', 'The dashboard failed to answer; its log has the details.');
    }
  }

  return {
    node: nodeHandler(basePath, handle),
    fetch: fetchHandler(basePath, handle),
    handle,
    stats: live.stats,
    async close() {
      live.close();
      if (owned) await database.close();
    },
  };
}

function normaliseBase(path: string): string {
  const trimmed = `/${path.replace(/^\/+|\/+$/g, '')}`;
  return trimmed === '/' ? '/' : trimmed;
}
