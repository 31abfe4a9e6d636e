/**
 * What stepkey/http adds to the conformance suite's answers, on both
 * adapters: bodies that are not JSON (multipart by its parts, whatever the
 * boundary; other bytes by their bytes and content type), a JSON body that
 * does not parse, a body over the limit, the answers a handler returns (a
 * 503 and a 401, 403, 408, 409 or 429 never stored, headers replayed from a
 * fixed list, a non-retryable error stored, an answer that is not one), an
 * optional key, the methods that are keyed — and Express with a body parser
 * in front, and a parser that sets req.body and leaves the stream unended.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import postgres from 'postgres';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HandlerAnswer } from '../../src/http/answer.js';
import { createFetchIdempotency } from '../../src/http/fetch.js';
import type { HandlerCall } from '../../src/http/keyed-handler.js';
import { createNodeIdempotency } from '../../src/http/node.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { silentLogger } from '../../src/log/logger.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const runs = new Map<string, number>();
const seenTypes: string[] = [];
const tenantOf = (authorization: string | null | undefined) => /^Bearer (\S+)$/.exec(authorization ?? '')?.[1] ?? null;

/** Records the call (in the claim's transaction) and answers what the body asks for. */
async function respond(call: HandlerCall): Promise<HandlerAnswer> {
  const { key, sql } = call.idempotency;
  runs.set(key, (runs.get(key) ?? 0) + 1);
  seenTypes.push(call.body.contentType ?? '');
  await sql`insert into http_calls (key) values (${key})`;
  const { kind, status } = (call.body.json ?? {}) as { kind?: string; status?: number };
  if (kind === 'status') return { status: status!, headers: { 'retry-after': '3', 'x-answered': String(status) }, body: { refused: status } };
  if (kind === 'unavailable') return { status: 503, headers: { 'retry-after': '7' }, body: { error: 'try later' } };
  if (kind === 'cookie') return { status: 201, headers: { 'set-cookie': 'session=1', 'x-request-id': key, location: '/things/1', etag: '"v1"' }, body: 'made' };
  if (kind === 'declined') throw new NonRetryableError('card declined', { code: 'PRECONDITION_FAILED' });
  if (kind === 'wrong') return { status: 99 } as HandlerAnswer;
  if (kind === 'nan') return { status: 201, body: { total: Number.NaN } };
  return { status: 201, body: { type: call.body.contentType, size: call.body.bytes.byteLength } };
}

const servers: Server[] = [];
const bases: Record<'node' | 'fetch' | 'express', string> = { node: '', fetch: '', express: '' };

/** Listens on a free port; `serve()` has called listen already, and is waited for. */
async function listen(server: Server, started = false): Promise<string> {
  if (started) await new Promise<void>((resolve) => (server.listening ? resolve() : server.once('listening', () => resolve())));
  else await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  await db().sql`create table http_calls (id bigserial primary key, key text not null)`;
  const ledger = new Ledger({ sql: db().sql });
  const optional = { route: 'optional', mode: 'optional' } as const;

  const node = createNodeIdempotency({ ledger, scope: (req: IncomingMessage) => tenantOf(req.headers.authorization), logger: silentLogger, maxBodyBytes: 4096 });
  const nodeRoutes: Record<string, ReturnType<typeof node.handler>> = {
    '/calls': node.handler({ route: 'calls', methods: ['POST', 'PATCH'] }, (_req, call) => respond(call)),
    '/optional': node.handler(optional, (_req, call) => ({ status: 200, body: { keyed: call.idempotency !== undefined } })),
  };
  bases.node = await listen(createServer((req, res) => nodeRoutes[new URL(req.url!, 'http://x').pathname]!(req, res)));

  const fetchStyle = createFetchIdempotency({ ledger, scope: (request) => tenantOf(request.headers.get('authorization')), logger: silentLogger, maxBodyBytes: 4096 });
  const fetchRoutes: Record<string, ReturnType<typeof fetchStyle.handler>> = {
    '/calls': fetchStyle.handler({ route: 'calls', methods: ['POST', 'PATCH'] }, (_request, call) => respond(call)),
    '/optional': fetchStyle.handler(optional, (_request, call) => ({ status: 200, body: { keyed: call.idempotency !== undefined } })),
  };
  bases.fetch = await listen(serve({ fetch: (request: Request) => fetchRoutes[new URL(request.url).pathname]!(request), port: 0, hostname: '127.0.0.1' }) as Server, true);

  const app = express();
  const behindText = createNodeIdempotency<express.Request, express.Response>({ ledger, scope: (req) => tenantOf(req.get('authorization')), logger: silentLogger });
  app.post('/text', express.text(), behindText.handler({ route: 'text' }, (_req, call) => respond(call)));
  app.all('/calls', behindText.handler({ route: 'calls' }, (_req, call) => respond(call)));
  app.get('/calls', (_req, res) => void res.json({ listed: true }));
  bases.express = await listen(createServer(app));
});
afterAll(() => {
  for (const server of servers) server.closeAllConnections(), server.close();
});

const keyed = (key: string) => ({ authorization: 'Bearer acme', 'idempotency-key': key });
const ask = (url: string, init: RequestInit) => fetch(url, init).then(async (response) => ({ status: response.status, headers: response.headers, body: await response.text() }));
const stored = async (key: string) => (await db().sql`select 1 from stepkey.ledger where key = ${key}`).length;
const written = async (key: string) => (await db().sql`select count(*)::int as n from http_calls where key = ${key}`)[0]!.n as number;

describe.each(['node', 'fetch'] as const)('stepkey/http (%s)', (adapter) => {
  const url = (path: string) => `${bases[adapter]}${path}`;
  const post = (key: string, body: string | FormData, headers: Record<string, string> = {}) => ask(url('/calls'), { method: 'POST', headers: { ...keyed(key), ...headers }, body });

  it('fingerprints a multipart body by its parts: a new boundary replays, a changed part is 422', async () => {
    const key = uniqueKey(adapter);
    const form = (csv: string) => {
      const data = new FormData();
      data.append('title', 'report');
      data.append('file', new Blob([csv], { type: 'text/csv' }), 'data.csv');
      return data;
    };
    const before = seenTypes.length;
    const first = await post(key, form('a,b\n1,2\n'));
    const again = await post(key, form('a,b\n1,2\n'));
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toBe(first.body);
    expect(runs.get(key)).toBe(1);
    expect(seenTypes.slice(before)).toEqual([expect.stringMatching(/^multipart\/form-data; boundary=/)]);
    expect((await post(key, form('a,b\n1,3\n'))).status).toBe(422);
    // The same parts under a boundary of one's own, written out by hand: still the same request.
    const boundary = 'hand-written-boundary';
    const handMade = [
      `--${boundary}`, 'Content-Disposition: form-data; name="title"', '', 'report',
      `--${boundary}`, 'Content-Disposition: form-data; name="file"; filename="data.csv"', 'Content-Type: text/csv', '', 'a,b\n1,2\n',
      `--${boundary}--`, '',
    ].join('\r\n');
    const byHand = await post(key, handMade, { 'content-type': `multipart/form-data; boundary="${boundary}"` });
    expect(byHand.status).toBe(201);
    expect(byHand.headers.get('idempotent-replayed')).toBe('true');
  });

  it('fingerprints any other body by its bytes and content type', async () => {
    const key = uniqueKey(adapter);
    const first = await post(key, 'hello', { 'content-type': 'text/plain; charset=UTF-8' });
    expect(first.status).toBe(201);
    const same = await post(key, 'hello', { 'content-type': 'text/plain;charset=utf-8' });
    expect(same.headers.get('idempotent-replayed')).toBe('true');
    expect((await post(key, 'hello!', { 'content-type': 'text/plain; charset=utf-8' })).status).toBe(422);
    expect((await post(key, 'hello', { 'content-type': 'text/csv' })).status).toBe(422);
    expect(runs.get(key)).toBe(1);
  });

  it('refuses a JSON body that does not parse (400) and one over the limit (413), before anything is claimed', async () => {
    const key = uniqueKey(adapter);
    const broken = await post(key, '{"sku": ', { 'content-type': 'application/json' });
    expect(broken.status).toBe(400);
    expect(broken.body).toMatch(/not valid JSON/);
    const large = await post(key, 'x'.repeat(5000), { 'content-type': 'text/plain' });
    expect(large.status).toBe(413);
    expect(large.body).toMatch(/larger than 4096 bytes/);
    expect(await stored(key)).toBe(0);
    expect(runs.get(key)).toBeUndefined();
  });

  it('sends a 503 the handler returns as it is, never stores it and rolls its writes back', async () => {
    const key = uniqueKey(adapter);
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await post(key, JSON.stringify({ kind: 'unavailable' }), { 'content-type': 'application/json' });
      expect(answer.status).toBe(503);
      expect(answer.headers.get('retry-after')).toBe('7');
      expect(answer.headers.get('idempotent-replayed')).toBeNull();
    }
    expect(runs.get(key)).toBe(2);
    expect(await written(key)).toBe(0);
    expect(await stored(key)).toBe(0);
  });

  it.each([401, 403, 408, 409, 429])('sends a %i the handler returns as it is, never stores it and rolls its writes back', async (status) => {
    const key = uniqueKey(adapter);
    const json = { 'content-type': 'application/json' };
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await post(key, JSON.stringify({ kind: 'status', status }), json);
      expect(answer.status).toBe(status);
      expect(JSON.parse(answer.body)).toEqual({ refused: status });
      expect(answer.headers.get('content-type')).toBe('application/json');
      expect(answer.headers.get('retry-after')).toBe('3');
      expect(answer.headers.get('x-answered')).toBe(String(status));
      expect(answer.headers.get('idempotent-replayed')).toBeNull();
      // The retry ran the handler again; its insert, made in the claim's transaction, rolled back.
      expect(runs.get(key)).toBe(attempt);
      expect(await written(key)).toBe(0);
      expect(await stored(key)).toBe(0);
    }
    // Nothing holds the key: another body with it runs, and its 2xx commits with its writes.
    const created = await post(key, JSON.stringify({ kind: 'created' }), json);
    expect(created.status).toBe(201);
    expect(created.headers.get('idempotent-replayed')).toBeNull();
    expect(runs.get(key)).toBe(3);
    expect(await written(key)).toBe(1);
    expect(await stored(key)).toBe(1);
  });

  it('replays the stored headers (the representation’s own) and not the others, and its writes commit', async () => {
    const key = uniqueKey(adapter);
    const first = await post(key, JSON.stringify({ kind: 'cookie' }), { 'content-type': 'application/json' });
    const again = await post(key, JSON.stringify({ kind: 'cookie' }), { 'content-type': 'application/json' });
    expect(first.headers.get('set-cookie')).toBe('session=1');
    expect(first.headers.get('x-request-id')).toBe(key);
    for (const name of ['location', 'etag', 'content-type']) expect(again.headers.get(name), name).toBe(first.headers.get(name));
    expect(first.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(again.headers.get('set-cookie')).toBeNull();
    expect(again.headers.get('x-request-id')).toBeNull();
    expect(again.body).toBe('made');
    expect(await written(key)).toBe(1);
  });

  it('stores an error marked non-retryable as a problem with its code’s status, and answers a non-answer 500', async () => {
    const declined = uniqueKey(adapter);
    const first = await post(declined, JSON.stringify({ kind: 'declined' }), { 'content-type': 'application/json' });
    const again = await post(declined, JSON.stringify({ kind: 'declined' }), { 'content-type': 'application/json' });
    expect(first.status).toBe(412);
    expect(JSON.parse(first.body)).toMatchObject({ status: 412, detail: 'card declined', code: 'PRECONDITION_FAILED' });
    expect(again.body).toBe(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await written(declined)).toBe(0);
    for (const kind of ['wrong', 'nan']) {
      const wrong = uniqueKey(adapter);
      const answer = await post(wrong, JSON.stringify({ kind }), { 'content-type': 'application/json' });
      expect(answer.status, kind).toBe(500);
      expect(answer.body).toMatch(/stepkey: the request failed \(error id err-/);
      expect(await stored(wrong)).toBe(0);
      expect(await written(wrong)).toBe(0);
    }
  });

  it('runs an optional route without a key, unkeyed; keys PATCH as configured; answers 405 to another method', async () => {
    const plain = await ask(url('/optional'), { method: 'POST', headers: { authorization: 'Bearer acme' }, body: '{}' });
    expect(JSON.parse(plain.body)).toEqual({ keyed: false });
    const withKey = await ask(url('/optional'), { method: 'POST', headers: keyed(uniqueKey(adapter)), body: '{}' });
    expect(JSON.parse(withKey.body)).toEqual({ keyed: true });
    const key = uniqueKey(adapter);
    const patched = await ask(url('/calls'), { method: 'PATCH', headers: keyed(key), body: 'x' });
    expect(patched.status).toBe(201);
    expect(runs.get(key)).toBe(1);
    const got = await ask(url('/calls'), { method: 'GET', headers: keyed(key) });
    expect(got.status).toBe(405);
    expect(got.headers.get('allow')).toBe('POST, PATCH');
  });
});

describe('stepkey/http behind Express', () => {
  it('refuses with a clear 500 a body a parser read as anything but JSON, and passes other methods on to next()', async () => {
    const key = uniqueKey('express');
    const refused = await ask(`${bases.express}/text`, { method: 'POST', headers: { ...keyed(key), 'content-type': 'text/plain' }, body: 'hello' });
    expect(refused.status).toBe(500);
    expect(refused.body).toMatch(/was read before the idempotent handler.*Mount the handler before any body parser/);
    expect(runs.get(key)).toBeUndefined();
    expect(await stored(key)).toBe(0);
    const listed = await ask(`${bases.express}/calls`, { method: 'GET' });
    expect(JSON.parse(listed.body)).toEqual({ listed: true });
    const created = await ask(`${bases.express}/calls`, { method: 'POST', headers: keyed(key), body: 'raw bytes' });
    expect(created.status).toBe(201);
  });
});

/**
 * A POST whose JSON body is written as one chunk of a request that is never
 * ended; its answer, as soon as it comes (then the request is dropped).
 */
function postUnended(url: string, headers: Record<string, string>, chunk: string): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (text: string) => (body += text));
      response.on('end', () => {
        resolve({ status: response.statusCode!, headers: response.headers, body });
        request.destroy();
      });
    });
    request.on('error', reject);
    request.write(chunk);
  });
}

describe('stepkey/http behind a parser that sets req.body and leaves the stream unended', () => {
  it('fingerprints the value the parser set, without waiting for the stream’s end', async () => {
    const idempotency = createNodeIdempotency({ ledger: new Ledger({ sql: db().sql }), scope: (req: IncomingMessage) => tenantOf(req.headers.authorization), logger: silentLogger });
    const handler = idempotency.handler({ route: 'preparsed' }, (_req, call) => {
      const { key } = call.idempotency;
      runs.set(key, (runs.get(key) ?? 0) + 1);
      return { status: 201, body: { json: call.body.json } };
    });
    // The "parser": takes the body's first chunk, parses it into req.body, and leaves the stream
    // paused and unended (as a framework that read the body itself may), then calls the handler.
    const base = await listen(
      createServer((req, res) => {
        req.once('data', (chunk: Buffer) => {
          req.pause();
          (req as IncomingMessage & { body?: unknown }).body = JSON.parse(chunk.toString('utf8'));
          void handler(req, res);
        });
      }),
    );
    const key = uniqueKey('preparsed');
    const first = await postUnended(`${base}/v1/things`, keyed(key), '{"sku":"a-1","quantity":2}');
    expect(first.status).toBe(201);
    expect(JSON.parse(first.body)).toEqual({ json: { sku: 'a-1', quantity: 2 } });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    // The same value with its keys reordered is the same request: the stored answer, replayed.
    const again = await postUnended(`${base}/v1/things`, keyed(key), '{"quantity":2,"sku":"a-1"}');
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toBe(first.body);
    expect(runs.get(key)).toBe(1);
    expect((await postUnended(`${base}/v1/things`, keyed(key), '{"sku":"a-1","quantity":3}')).status).toBe(422);
  });

  it('reads the stream when req.body is an empty {} left on it unread (body-parser 1.x, Express 4)', async () => {
    const idempotency = createNodeIdempotency({ ledger: new Ledger({ sql: db().sql }), scope: () => 'acme', logger: silentLogger });
    const handler = idempotency.handler({ route: 'placeholder' }, (_req, call) => ({
      status: 201,
      body: { type: call.body.contentType, text: Buffer.from(call.body.bytes).toString('utf8') },
    }));
    const base = await listen(
      createServer((req, res) => {
        (req as IncomingMessage & { body?: unknown }).body = {};
        void handler(req, res);
      }),
    );
    const key = uniqueKey('placeholder');
    const first = await ask(`${base}/`, { method: 'POST', headers: { ...keyed(key), 'content-type': 'text/plain' }, body: 'hello' });
    expect(first.status).toBe(201);
    expect(JSON.parse(first.body)).toEqual({ type: 'text/plain', text: 'hello' });
    expect((await ask(`${base}/`, { method: 'POST', headers: { ...keyed(key), 'content-type': 'text/plain' }, body: 'hello!' })).status).toBe(422);
  });
});

describe('stepkey/http while Postgres is unreachable', () => {
  it('answers 503 + Retry-After by default, and runs a fail-open handler unkeyed, with no transaction', async () => {
    const dead = postgres('postgres://postgres@127.0.0.1:1/none', { max: 1, connect_timeout: 1, onnotice: () => {} });
    const down = createNodeIdempotency({ ledger: new Ledger({ sql: dead }), scope: () => 'acme', logger: silentLogger });
    const routes: Record<string, ReturnType<typeof down.handler>> = {
      '/closed': down.handler({ route: 'closed' }, () => ({ status: 201, body: 'ran' })),
      '/open': down.handler({ route: 'open', onLedgerDown: 'open' }, (_req, { idempotency }) => ({ status: 201, body: { fields: Object.keys(idempotency).sort() } })),
    };
    const base = await listen(createServer((req, res) => routes[new URL(req.url!, 'http://x').pathname]!(req, res)));
    try {
      const closed = await ask(`${base}/closed`, { method: 'POST', headers: keyed(uniqueKey('down')), body: '{}' });
      expect(closed.status).toBe(503);
      expect(closed.headers.get('retry-after')).toBe('1');
      expect(closed.body).toMatch(/database is unavailable/);
      const open = await ask(`${base}/open`, { method: 'POST', headers: keyed(uniqueKey('down')), body: '{}' });
      expect(open.status).toBe(201);
      expect(JSON.parse(open.body)).toEqual({ fields: ['bypassed', 'key', 'scope'] });
    } finally {
      await dead.end({ timeout: 0 });
    }
  });
});
