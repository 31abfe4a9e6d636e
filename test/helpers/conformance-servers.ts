/**
 * One keyed operation served four ways, for the Idempotency-Key conformance
 * suite: the tRPC option on tRPC's standalone (node:http) server, and
 * stepkey/http's Node handler on plain node:http and on Express (behind
 * express.json()), and its fetch handler on Hono (@hono/node-server). Each
 * has two routes, `charge` and `refund`, which record an effect in
 * `conformance_effects` through the claim's transaction and answer
 * `{ id, sku, zeta, alpha }`; the caller is the bearer token. The input may
 * ask for a failure: `client` (a 404 after the write), `sql` (a statement
 * Postgres refuses), or to wait at a gate the test opens.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { TRPCError, initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import type { TRPCRequestInfo } from '@trpc/server/http';
import express from 'express';
import { Hono } from 'hono';
import { z } from 'zod';
import type { TxSql } from '../../src/db/transaction.js';
import { createFetchIdempotency } from '../../src/http/fetch.js';
import { createNodeIdempotency } from '../../src/http/node.js';
import type { HandlerAnswer } from '../../src/http/answer.js';
import type { HandlerCall } from '../../src/http/keyed-handler.js';
import type { Ledger } from '../../src/ledger/ledger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { silentLogger } from '../../src/log/logger.js';

export interface Reply {
  status: number;
  body: string;
  headers: Headers;
}

export type Operation = 'charge' | 'refund';

export interface Target {
  name: string;
  /** The URL of an operation. */
  url(operation: Operation): string;
  /** The status of a first success (tRPC answers 200, the HTTP routes 201). */
  created: number;
  close(): Promise<void>;
}

/** Handler runs per sku, committed or not. */
export const entered = new Map<string, number>();

const gates = new Map<string, { promise: Promise<void>; open: () => void }>();
export function gate(name: string): { promise: Promise<void>; open: () => void } {
  let entry = gates.get(name);
  if (!entry) {
    let open!: () => void;
    const promise = new Promise<void>((resolve) => (open = resolve));
    entry = { promise, open };
    gates.set(name, entry);
  }
  return entry;
}

const orderInput = z.object({ sku: z.string(), quantity: z.number().int(), gate: z.string().optional(), fail: z.enum(['client', 'sql']).optional() });
type Order = z.infer<typeof orderInput>;

/** The operation itself, as every server runs it: the effect, then the asked-for failure. */
async function operate(operation: Operation, sql: TxSql, scope: string, order: Order): Promise<{ notFound?: string; result?: object }> {
  entered.set(order.sku, (entered.get(order.sku) ?? 0) + 1);
  const [row] = await sql`insert into conformance_effects (scope, operation, sku) values (${scope}, ${operation}, ${order.sku}) returning id`;
  if (order.gate) await gate(order.gate).promise;
  if (order.fail === 'client') return { notFound: `no product ${order.sku}` };
  if (order.fail === 'sql') await sql`select * from conformance_missing_table where secret = ${'card 4242'}`;
  return { result: { id: Number(row!.id), sku: order.sku, zeta: 1, alpha: [3, 1, 2] } };
}

const tenantOf = (authorization: string | null | undefined) => /^Bearer (\S+)$/.exec(authorization ?? '')?.[1] ?? null;

async function listening(server: Server): Promise<string> {
  // Only the client drops idle keep-alive sockets. A server that closes them advertises its timeout
  // (Keep-Alive: timeout=N), and fetch keeps a socket until a second before it: on a busy host, whose
  // timers ran late by more than that, a request went out on a socket the server was closing and
  // failed with "other side closed" (with the server's 5 s, and with 30 s). With no timeout the server
  // advertises none, and fetch drops idle sockets after its own 4 s; closing() ends the rest.
  server.keepAliveTimeout = 0;
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function closing(server: Server): () => Promise<void> {
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
}

async function trpcTarget(ledger: Ledger): Promise<Target> {
  interface Ctx {
    req: IncomingMessage;
    res: import('node:http').ServerResponse;
    info: TRPCRequestInfo;
    tenant: string | null;
  }
  const t = initTRPC.context<Ctx>().create({ isDev: false });
  const idem = createIdempotency<Ctx>({ ledger, scope: (ctx) => ctx.tenant, logger: silentLogger });
  const procedure = (operation: Operation) =>
    t.procedure
      .input(orderInput)
      .use(idem.procedure())
      .mutation(async ({ ctx, input }) => {
        const done = await operate(operation, ctx.idempotency.sql, ctx.idempotency.scope, input);
        if (done.notFound) throw new TRPCError({ code: 'NOT_FOUND', message: done.notFound });
        return done.result;
      });
  const router = t.router({ charge: procedure('charge'), refund: procedure('refund') });
  const server = createHTTPServer({ router, createContext: ({ req, res, info }) => ({ req, res, info, tenant: tenantOf(req.headers.authorization) }) });
  const base = await listening(server);
  return { name: 'tRPC option (node:http)', url: (operation) => `${base}/${operation}`, created: 200, close: closing(server) };
}

/** The operation as an HTTP handler: 201 with the result, 404 for a client failure. */
function httpOperation(operation: Operation) {
  return async (call: HandlerCall): Promise<HandlerAnswer> => {
    const order = orderInput.safeParse(call.body.json);
    if (!order.success) return { status: 400, body: { error: 'invalid order' } };
    const done = await operate(operation, call.idempotency.sql, call.idempotency.scope, order.data);
    if (done.notFound) return { status: 404, body: { error: done.notFound } };
    return { status: 201, headers: { location: `/v1/${operation}s/${(done.result as { id: number }).id}` }, body: done.result };
  };
}

async function nodeTarget(ledger: Ledger): Promise<Target> {
  const idem = createNodeIdempotency({ ledger, scope: (req) => tenantOf(req.headers.authorization), logger: silentLogger });
  const charge = idem.handler({ route: 'charges.create' }, (_req, call) => httpOperation('charge')(call));
  const refund = idem.handler({ route: 'refunds.create' }, (_req, call) => httpOperation('refund')(call));
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path === '/v1/charges') return charge(req, res);
    if (path === '/v1/refunds') return refund(req, res);
    res.writeHead(404).end();
  });
  const base = await listening(server);
  return { name: 'stepkey/http node handler (node:http)', url: (operation) => `${base}/v1/${operation}s`, created: 201, close: closing(server) };
}

async function expressTarget(ledger: Ledger): Promise<Target> {
  const idem = createNodeIdempotency<express.Request, express.Response>({ ledger, scope: (_req, res) => res.locals.tenant as string | null, logger: silentLogger });
  const app = express();
  app.use((req, res, next) => {
    res.locals.tenant = tenantOf(req.get('authorization'));
    next();
  });
  app.use(express.json());
  app.post('/v1/charges', idem.handler({ route: 'charges.create' }, (_req, call) => httpOperation('charge')(call)));
  app.post('/v1/refunds', idem.handler({ route: 'refunds.create' }, (_req, call) => httpOperation('refund')(call)));
  const server = createServer(app);
  const base = await listening(server);
  return { name: 'stepkey/http node handler (Express, express.json())', url: (operation) => `${base}/v1/${operation}s`, created: 201, close: closing(server) };
}

async function honoTarget(ledger: Ledger): Promise<Target> {
  const idem = createFetchIdempotency({ ledger, scope: (request) => tenantOf(request.headers.get('authorization')), logger: silentLogger });
  const charge = idem.handler({ route: 'charges.create' }, (_request, call) => httpOperation('charge')(call));
  const refund = idem.handler({ route: 'refunds.create' }, (_request, call) => httpOperation('refund')(call));
  const app = new Hono();
  app.post('/v1/charges', (c) => charge(c.req.raw, c));
  app.post('/v1/refunds', (c) => refund(c.req.raw, c));
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
  await new Promise<void>((resolve) => (server.listening ? resolve() : server.once('listening', () => resolve())));
  const base = await listening(server);
  return { name: 'stepkey/http fetch handler (Hono)', url: (operation) => `${base}/v1/${operation}s`, created: 201, close: closing(server) };
}

export const targets = { trpc: trpcTarget, node: nodeTarget, express: expressTarget, hono: honoTarget } as const;
export type TargetName = keyof typeof targets;

/** A POST with the body exactly as given. */
export async function send(url: string, body: string, headers: Record<string, string>): Promise<Reply> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: response.status, body: await response.text(), headers: response.headers };
}
