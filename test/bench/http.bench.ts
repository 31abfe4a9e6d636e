/**
 * stepkey/http over real HTTP on loopback: a keyed POST's first call (claim +
 * handler + stored answer) and its replay, against the same handler without
 * the middleware (its insert in a bare transaction), through both adapters —
 * the Node handler on node:http and the fetch handler on @hono/node-server —
 * in one run, each ratio against its own adapter's plain handler.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'node:http';
import { serve } from '@hono/node-server';
import { connect } from '../../src/db/connect.js';
import type { TxSql } from '../../src/db/transaction.js';
import { createFetchIdempotency } from '../../src/http/fetch.js';
import { createNodeIdempotency } from '../../src/http/node.js';
import type { HandlerAnswer } from '../../src/http/answer.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { benchDatabase, measure, medianOf, printTable } from './harness.js';

const body = '{"sku":"bench","quantity":1}';

/** The handler both ways: one insert in the transaction it is given, the order as JSON. */
async function createOrder(sql: TxSql | import('postgres').TransactionSql, payload: unknown): Promise<HandlerAnswer> {
  const order = payload as { sku: string; quantity: number };
  const [row] = await sql`insert into bench_http_orders (sku, quantity) values (${order.sku}, ${order.quantity}) returning id`;
  return { status: 201, body: { orderId: Number(row!.id), sku: order.sku } };
}

async function started(server: Server, listen: boolean): Promise<string> {
  if (listen) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  else await new Promise<void>((resolve) => (server.listening ? resolve() : server.once('listening', () => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function httpBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 40 });
  await db.sql`create table bench_http_orders (id bigserial primary key, sku text not null, quantity int not null)`;
  const ledger = new Ledger({ sql: db.sql });
  const scope = () => 'bench';

  const node = createNodeIdempotency({ ledger, scope });
  const nodeKeyed = node.handler({ route: 'orders.create' }, (_req, { body: sent, idempotency }) => createOrder(idempotency.sql, sent.json));
  const nodeServer = createServer((req, res) => {
    if (req.url === '/keyed') return nodeKeyed(req, res);
    // Without the middleware: the same body read, insert and answer.
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void db.sql.begin((tx) => createOrder(tx, JSON.parse(Buffer.concat(chunks).toString('utf8')))).then((answer) => {
        res.writeHead(answer.status, { 'content-type': 'application/json' }).end(JSON.stringify(answer.body));
      });
    });
  });

  const fetchStyle = createFetchIdempotency({ ledger, scope });
  const fetchKeyed = fetchStyle.handler({ route: 'orders.create' }, (_request, { body: sent, idempotency }) => createOrder(idempotency.sql, sent.json));
  const fetchPlain = async (request: Request) => {
    const payload: unknown = await request.json();
    const answer = await db.sql.begin((tx) => createOrder(tx, payload));
    return new Response(JSON.stringify(answer.body), { status: answer.status, headers: { 'content-type': 'application/json' } });
  };
  const fetchServer = serve({
    fetch: (request: Request) => (new URL(request.url).pathname === '/keyed' ? fetchKeyed(request) : fetchPlain(request)),
    port: 0,
    hostname: '127.0.0.1',
  }) as Server;

  const bases = { 'node:http, Node handler': await started(nodeServer, true), '@hono/node-server, fetch handler': await started(fetchServer, false) };
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const call = (base: string, path: string, key?: string) =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        `${base}/${path}`,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': String(body.length), ...(key ? { 'idempotency-key': `"${key}"` } : {}) },
        },
        (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 201 ? resolve() : reject(new Error(`${path} answered ${res.statusCode}`))));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  try {
    const rows: (string | number)[][] = [];
    let round = 0;
    for (const [adapter, base] of Object.entries(bases)) {
      for (const concurrency of [1, 16]) {
        round += 1;
        const prefix = `h${round}`;
        const plain = await medianOf(options.runs, () => measure(options.ops, concurrency, () => call(base, 'plain')));
        const first = await medianOf(options.runs, (run) => measure(options.ops, concurrency, (i) => call(base, 'keyed', `${prefix}-${run}-${i}`)));
        const replay = await medianOf(options.runs, () => measure(options.ops, concurrency, (i) => call(base, 'keyed', `${prefix}-0-${i}`)));
        const ratio = (m: { opsPerSecond: number }) => (m.opsPerSecond / plain.opsPerSecond).toFixed(2);
        rows.push([`${adapter}: plain handler, c=${concurrency}`, plain.opsPerSecond, plain.p50Ms, plain.p99Ms, '1.00']);
        rows.push([`${adapter}: keyed, first call, c=${concurrency}`, first.opsPerSecond, first.p50Ms, first.p99Ms, ratio(first)]);
        rows.push([`${adapter}: keyed, replay, c=${concurrency}`, replay.opsPerSecond, replay.p50Ms, replay.p99Ms, ratio(replay)]);
      }
    }
    printTable(
      `stepkey/http over HTTP (${options.ops} requests per measurement, median of ${options.runs})`,
      ['operation', 'req/s', 'p50 ms', 'p99 ms', 'vs plain'],
      rows,
    );
  } finally {
    nodeServer.close();
    fetchServer.close();
    agent.destroy();
    await db.close();
    await database.close();
  }
}
