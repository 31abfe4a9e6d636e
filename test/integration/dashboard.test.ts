/**
 * The dashboard's server, without a browser (test/browser/run.ts drives
 * one): who may read and act — read-only without a token, the token for
 * actions (a session cookie plus the CSRF header and the same origin, or
 * the bearer token), read-only mode; actions audited; the Node handler in a
 * real HTTP server under a base path and the fetch handler alike; the
 * answers' security headers; and the shared poll — ten polling tabs cost one
 * probe per poll interval, and a change reaches them.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDashboard, type Dashboard } from '../../src/dashboard/dashboard.js';
import type { KeyTreeView, LiveEnvelope, RunsView, SessionView } from '../../src/dashboard/api-types.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 5 });
const TOKEN = 'a-token-of-24-characters';

const gatedRun = defineWorkflow({
  name: 'dash-gated',
  version: 1,
  input: z.object({ note: z.string() }),
  steps: { first: step('first.v1'), second: step('second.v1', { retry: { attempts: 1 } }) },
  async run({ input, steps }) {
    await steps.first.tx(async () => input.note);
    return steps.second.tx(async (_db, { sql }) => {
      const [open] = await sql`select 1 from dash_gate where open`;
      if (!open) throw new Error(`gate closed for <script>alert(1)</script>`);
      return 'through';
    });
  },
});

let failedKey = '';
beforeAll(async () => {
  await db().sql`create table dash_gate (open boolean not null)`;
  const engine = testEngine(db(), [gatedRun]);
  failedKey = uniqueKey('failed');
  await expect(engine.run(gatedRun, { scope: 'dash', key: failedKey }, { note: '<img src=x onerror=alert(1)>' })).rejects.toThrow(/gate closed/);
  await engine.shutdown();
});

async function call(dashboard: Dashboard, path: string, init: RequestInit & { origin?: string } = {}) {
  const headers = new Headers(init.headers);
  headers.set('host', '127.0.0.1');
  const response = await dashboard.fetch(new Request(`http://127.0.0.1${path}`, { ...init, headers }), { remoteAddress: '127.0.0.1' });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: text.startsWith('{') ? JSON.parse(text) : undefined };
}

/** A GET over real HTTP naming the given Host (or, with null, none at all). */
function getWithHost(url: string, host: string | null, headers: Record<string, string> = {}): Promise<{ status: number; code: string | undefined }> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const sent = httpRequest(
      { host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, headers: host === null ? headers : { ...headers, host }, setHost: false },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
        response.on('end', () => {
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {
            code = undefined;
          }
          resolve({ status: response.statusCode ?? 0, code });
        });
      },
    );
    sent.on('error', reject);
    sent.end();
  });
}

async function serve(dashboard: Dashboard): Promise<{ server: Server; base: string; port: number }> {
  const server = createServer(dashboard.node);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return { server, base: `http://127.0.0.1:${port}`, port };
}

async function stop(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

const jsonPost = (body: unknown, headers: Record<string, string> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

describe('without a token', () => {
  it('reads, and refuses every action as read-only', async () => {
    const dashboard = createDashboard({ database: db(), onError: () => {} });
    try {
      const session = (await call(dashboard, '/api/session')).json as SessionView;
      expect(session).toMatchObject({ canRead: true, canAct: false, readOnly: true, tokenConfigured: false, csrf: null });
      expect(session.statuses.map((status) => status.name)).toEqual(['stuck', 'needs_review', 'failed', 'errored', 'running', 'waiting', 'completed', 'cancelled', 'deadline_exceeded']);
      const runs = await call(dashboard, '/api/runs?status=failed');
      expect(runs.status).toBe(200);
      expect((runs.json as { data: RunsView }).data.runs.map((run) => run.key)).toContain(failedKey);
      const refused = await call(dashboard, '/api/actions/cancel', jsonPost({ scope: 'dash', key: failedKey }, { authorization: `Bearer ${TOKEN}` }));
      expect(refused.status).toBe(403);
      expect(refused.json.error.code).toBe('read_only');
      expect((await call(dashboard, '/api/session', jsonPost({ token: TOKEN }))).status).toBe(403);
    } finally {
      await dashboard.close();
    }
  });

  it('answers with security headers, JSON only, and no stored markup outside JSON strings', async () => {
    const dashboard = createDashboard({ database: db(), onError: () => {} });
    try {
      const run = await call(dashboard, `/api/run?scope=dash&key=${failedKey}`);
      expect(run.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(run.headers.get('x-content-type-options')).toBe('nosniff');
      expect(run.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'self'/);
      expect(run.headers.get('x-frame-options')).toBe('DENY');
      const tree = (run.json as { data: KeyTreeView }).data;
      expect(tree.matches[0]!.input).toBe('{"note":"<img src=x onerror=alert(1)>"}');
      expect(tree.matches[0]!.row.lastError).toContain('<script>alert(1)</script>');
      expect(run.text).not.toContain('fingerprint');
      const page = await call(dashboard, '/');
      expect([200, 503]).toContain(page.status);
      if (page.status === 200) {
        expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
        expect(page.text).toContain('<base href="/">');
        expect(page.text).not.toContain(failedKey);
      } else expect(page.json.error.code).toBe('not_built');
      expect((await call(dashboard, '/api/runs?status=nonsense')).status).toBe(400);
      expect((await call(dashboard, '/api/run?key=x')).json.error.message).toMatch(/scope/);
      expect((await call(dashboard, '/api/nothing')).status).toBe(404);
      expect((await call(dashboard, '/assets/../../package.json')).status).toBe(404);
    } finally {
      await dashboard.close();
    }
  });
});

describe('with a token', () => {
  let dashboard: Dashboard;
  let server: Server;
  let base = '';
  beforeAll(async () => {
    dashboard = createDashboard({ database: db(), token: TOKEN, basePath: '/ops', onError: () => {} });
    server = createServer(dashboard.node);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ops`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await dashboard.close();
  });

  it('needs the token to read, and signs in with it (a session cookie)', async () => {
    expect((await fetch(`${base}/api/runs`)).status).toBe(401);
    expect((await fetch(`${base}/api/runs`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    const wrong = await fetch(`${base}/api/session`, jsonPost({ token: 'not-it-not-it-not-it' }));
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('set-cookie')).toBeNull();
    const right = await fetch(`${base}/api/session`, jsonPost({ token: TOKEN }));
    expect(right.status).toBe(200);
    const cookie = right.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^stepkey_dashboard=v1\.\d+\.[\w-]+; Path=\/ops; Max-Age=43200; HttpOnly; SameSite=Strict$/);
    const session = (await (await fetch(`${base}/api/session`, { headers: { cookie: cookie.split(';')[0]! } })).json()) as SessionView;
    expect(session).toMatchObject({ canRead: true, canAct: true, signedIn: true });
    expect(session.csrf).toMatch(/^[\w-]{43}$/);
    const forged = cookie.split(';')[0]!.replace(/\.[\w-]+$/, '.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
    expect((await fetch(`${base}/api/runs`, { headers: { cookie: forged } })).status).toBe(401);
  });

  it('acts only with a POST, JSON, the CSRF header and the same origin; each action is audited', async () => {
    const signedIn = await fetch(`${base}/api/session`, jsonPost({ token: TOKEN }));
    const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!;
    const { csrf } = (await (await fetch(`${base}/api/session`, { headers: { cookie } })).json()) as SessionView;
    const target = { scope: 'dash', key: failedKey };
    const act = (headers: Record<string, string>, body: unknown = target, method = 'POST') =>
      fetch(`${base}/api/actions/resume`, { method, headers: { cookie, ...headers }, ...(method === 'POST' ? { body: JSON.stringify(body) } : {}) });
    expect((await act({ 'content-type': 'application/json' }, target, 'GET')).status).toBe(405);
    expect((await act({ 'content-type': 'application/json' })).status).toBe(403);
    expect((await act({ 'content-type': 'text/plain', 'x-stepkey-csrf': csrf! })).status).toBe(415);
    expect((await act({ 'content-type': 'application/json', 'x-stepkey-csrf': 'x'.repeat(43) })).status).toBe(403);
    expect((await act({ 'content-type': 'application/json', 'x-stepkey-csrf': csrf!, origin: 'http://evil.example' })).status).toBe(403);
    expect((await act({ 'content-type': 'application/json', 'x-stepkey-csrf': csrf!, 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect((await act({ 'content-type': 'application/json', 'x-stepkey-csrf': csrf! }, { ...target, extra: 1 })).status).toBe(400);
    expect(await db().sql`select 1 from stepkey.audit_log where key = ${failedKey}`).toHaveLength(0);

    const resumed = await act({ 'content-type': 'application/json', 'x-stepkey-csrf': csrf!, origin: base.replace('/ops', '') });
    expect(resumed.status).toBe(200);
    expect(await resumed.json()).toMatchObject({ applied: true, previous: 'failed' });
    // Made due, nothing ran: in progress with an expired lease and a new token, for any sweeper.
    const [row] = await db().sql`select status, locked_until <= now() as due, attempts from stepkey.ledger where scope = 'dash' and key = ${failedKey}`;
    expect(row).toEqual({ status: 'in_progress', due: true, attempts: 1 });

    const cancel = await fetch(`${base}/api/actions/cancel`, jsonPost({ ...target, reason: 'operator <b>said</b> so' }, { authorization: `Bearer ${TOKEN}` }));
    expect(cancel.status).toBe(200);
    const again = await fetch(`${base}/api/actions/cancel`, jsonPost(target, { authorization: `Bearer ${TOKEN}` }));
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ applied: false, previous: 'cancelled' });
    const audit = await db().sql`select action, actor, source, applied, detail from stepkey.audit_log where key = ${failedKey} order by id`;
    expect(audit.map((entry) => [entry.action, entry.actor, entry.source, entry.applied])).toEqual([
      ['resume', 'dashboard@127.0.0.1', 'dashboard', true],
      ['cancel', 'dashboard@127.0.0.1', 'dashboard', true],
      ['cancel', 'dashboard@127.0.0.1', 'dashboard', false],
    ]);
    expect(JSON.parse(audit[1]!.detail)).toEqual({ reason: 'operator <b>said</b> so', before: 'stuck' });
    const retry = await fetch(`${base}/api/actions/retry`, jsonPost({ ids: ['999999'] }, { authorization: `Bearer ${TOKEN}` }));
    expect(await retry.json()).toMatchObject({ applied: false, missed: ['999999'] });
  });

  it('guards /metrics as it guards the API: the token to read, unless reads are public', async () => {
    const anonymous = await fetch(`${base}/metrics`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.text()).not.toContain('stepkey_');
    const bearer = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(bearer.status).toBe(200);
    expect(await bearer.text()).toContain('# TYPE stepkey_runs_started_total counter');
    const cookie = (await fetch(`${base}/api/session`, jsonPost({ token: TOKEN }))).headers.get('set-cookie')!.split(';')[0]!;
    expect((await fetch(`${base}/metrics`, { headers: { cookie } })).status).toBe(200);
    const publicRead = createDashboard({ database: db(), token: TOKEN, publicRead: true, onError: () => {} });
    try {
      expect((await call(publicRead, '/metrics')).status).toBe(200);
    } finally {
      await publicRead.close();
    }
  });

  it('in read-only mode refuses actions even with the token', async () => {
    const readOnly = createDashboard({ database: db(), token: TOKEN, readOnly: true, onError: () => {} });
    try {
      const refused = await call(readOnly, '/api/actions/resume', jsonPost({ scope: 'dash', key: failedKey }, { authorization: `Bearer ${TOKEN}` }));
      expect(refused.status).toBe(403);
      expect(refused.json.error.code).toBe('read_only');
      expect((await call(readOnly, '/api/session', { headers: { authorization: `Bearer ${TOKEN}` } })).json).toMatchObject({ canRead: true, canAct: false, readOnly: true });
    } finally {
      await readOnly.close();
    }
  });

  it('refuses a short token', () => {
    expect(() => createDashboard({ database: db(), token: 'short' })).toThrow(/at least 16 characters/);
  });
});

describe('the Host a request names', () => {
  it('without a token, answers only loopback names and the allowed hosts: anything else is 403 before a read', async () => {
    const dashboard = createDashboard({ database: db(), onError: () => {} });
    const { server, base, port } = await serve(dashboard);
    try {
      for (const host of ['attacker.example', `attacker.example:${port}`, '127.0.0.1.attacker.example', 'localhost.attacker.example', '[::2]', '10.0.0.1']) {
        for (const path of ['/api/runs', '/api/session', '/metrics', '/', `/api/run?scope=dash&key=${failedKey}`]) {
          expect(await getWithHost(`${base}${path}`, host), `${host} ${path}`).toEqual({ status: 403, code: 'host_not_allowed' });
        }
      }
      expect(dashboard.stats.reads).toBe(0);
      for (const host of ['localhost', `localhost:${port}`, 'LocalHost', '127.0.0.1', `127.0.0.1:${port}`, '[::1]', `[::1]:${port}`]) {
        expect((await getWithHost(`${base}/api/runs`, host)).status, host).toBe(200);
      }
      // HTTP/1.1 without a Host: Node's server refuses it itself; the handler, called without one, too.
      expect([400, 403]).toContain((await getWithHost(`${base}/api/runs`, null)).status);
      const bare = await dashboard.handle({ method: 'GET', path: '/api/runs', query: new URLSearchParams(), headers: {}, body: undefined, remoteAddress: '127.0.0.1', secure: false });
      expect(bare.status).toBe(403);
    } finally {
      await stop(server);
      await dashboard.close();
    }
  });

  it('answers the hosts of allowedHosts (a leading dot: the domain and its subdomains), without their port, in any case', async () => {
    const dashboard = createDashboard({ database: db(), allowedHosts: ['ops.example.test', '.internal.test', '::2'], onError: () => {} });
    const { server, base, port } = await serve(dashboard);
    try {
      for (const host of ['ops.example.test', `OPS.example.test:${port}`, 'internal.test', 'a.b.internal.test', '[::2]:80', 'localhost']) {
        expect((await getWithHost(`${base}/api/runs`, host)).status, host).toBe(200);
      }
      for (const host of ['example.test', 'x.ops.example.test', 'internal.test.attacker.example', 'xinternal.test']) {
        expect(await getWithHost(`${base}/api/runs`, host), host).toEqual({ status: 403, code: 'host_not_allowed' });
      }
    } finally {
      await stop(server);
      await dashboard.close();
    }
    expect(() => createDashboard({ database: db(), allowedHosts: ['ops example'] })).toThrow(/allowedHosts/);
    expect(() => createDashboard({ database: db(), allowedHosts: 'ops.example.test' as never })).toThrow(/allowedHosts/);
  });

  it('with a token that reading needs, answers any Host: the token guards it', async () => {
    const dashboard = createDashboard({ database: db(), token: TOKEN, onError: () => {} });
    const { server, base } = await serve(dashboard);
    try {
      expect(await getWithHost(`${base}/api/runs`, 'ops.example.test')).toEqual({ status: 401, code: 'sign_in' });
      expect((await getWithHost(`${base}/api/runs`, 'ops.example.test', { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    } finally {
      await stop(server);
      await dashboard.close();
    }
    const publicRead = createDashboard({ database: db(), token: TOKEN, publicRead: true, onError: () => {} });
    try {
      const request = (host: string) => publicRead.fetch(new Request('http://127.0.0.1/api/runs', { headers: { host } }));
      expect((await request('attacker.example')).status).toBe(403);
      expect((await request('127.0.0.1')).status).toBe(200);
      // A fetch-style request without a Host header is checked by its URL's host.
      expect((await publicRead.fetch(new Request('http://attacker.example/api/runs'))).status).toBe(403);
    } finally {
      await publicRead.close();
    }
  });
});

describe('the shared poll', () => {
  it('ten polling tabs cost one probe per interval; a change reaches them all', async () => {
    const pollMs = 200;
    const dashboard = createDashboard({ database: db(), pollMs, onError: () => {} });
    try {
      const views = ['/api/runs', '/api/runs?status=failed', '/api/summary', `/api/run?scope=dash&key=${failedKey}`, '/api/jobs'];
      const versions = new Map<number, string>();
      let stop = false;
      const tabs = Array.from({ length: 10 }, async (_, tab) => {
        while (!stop) {
          const since = versions.get(tab);
          const answer = (await call(dashboard, `${views[tab % views.length]}${views[tab % views.length]!.includes('?') ? '&' : '?'}since=${since ?? ''}`)).json as LiveEnvelope<unknown>;
          versions.set(tab, answer.version);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      });
      // Postgres's write counters reach the probe up to a couple of seconds after a commit: let the
      // writes of the tests before settle (no view read again for 2 s) before measuring.
      for (let quiet = 0, last = -1, started = Date.now(); quiet < 10 && Date.now() - started < PATIENCE_MS; ) {
        await new Promise((resolve) => setTimeout(resolve, pollMs));
        quiet = dashboard.stats.reads === last ? quiet + 1 : 0;
        last = dashboard.stats.reads;
      }
      const start = { ...dashboard.stats };
      const startedAt = performance.now();
      // A window of at least 2 s and a few probes (a busy host's timers fire late: the window grows).
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await expect.poll(() => dashboard.stats.probes - start.probes).toBeGreaterThanOrEqual(3);
      const windowMs = performance.now() - startedAt;
      const probes = dashboard.stats.probes - start.probes;
      const reads = dashboard.stats.reads - start.reads;
      // About 40 requests a second from the tabs; the database sees one probe per interval.
      expect(probes).toBeLessThanOrEqual(windowMs / pollMs + 1);
      // Nothing changed: no view was read again (one late counter would read each once).
      expect(reads).toBeLessThanOrEqual(views.length);

      const before = versions.get(0);
      const engine = testEngine(db(), [gatedRun]);
      await db().sql`insert into dash_gate values (true)`;
      await engine.run(gatedRun, { scope: 'dash', key: uniqueKey('new') }, { note: 'fresh' });
      await engine.shutdown();
      await expect.poll(() => versions.get(0), { interval: 100 }).not.toBe(before);
      stop = true;
      await Promise.all(tabs);
    } finally {
      await dashboard.close();
    }
  });
});
