/**
 * tRPC over real HTTP on loopback: an idempotent mutation (first calls, and
 * replays of completed keys) against the same mutation without the option.
 */
import type { AddressInfo } from 'node:net';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { Agent, request } from 'node:http';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { benchDatabase, measure, medianOf, printTable } from './harness.js';

export async function trpcBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 40 });
  await db.sql`create table bench_orders (id bigserial primary key, sku text not null)`;
  type Ctx = { req: import('node:http').IncomingMessage; res: import('node:http').ServerResponse; tenant: string };
  const t = initTRPC.context<Ctx>().create({ isDev: false });
  const idem = createIdempotency<Ctx>({ ledger: new Ledger({ sql: db.sql }), scope: (ctx) => ctx.tenant });
  const input = z.object({ sku: z.string() });
  const router = t.router({
    plain: t.procedure.input(input).mutation(async ({ input: order }) => {
      const [row] = await db.sql.begin((tx) => tx`insert into bench_orders (sku) values (${order.sku}) returning id`);
      return { orderId: Number(row!.id), sku: order.sku };
    }),
    keyed: t.procedure
      .input(input)
      .use(idem.procedure())
      .mutation(async ({ ctx, input: order }) => {
        const [row] = await ctx.idempotency!.sql`insert into bench_orders (sku) values (${order.sku}) returning id`;
        return { orderId: Number(row!.id), sku: order.sku };
      }),
  });
  const server = createHTTPServer({ router, createContext: ({ req, res }) => ({ req, res, tenant: 'bench' }) });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const body = '{"sku":"bench"}';
  const call = (path: string, key?: string) =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        `${base}/${path}`,
        {
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            'content-length': String(body.length),
            ...(key ? { 'idempotency-key': `"${key}"` } : {}),
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${path} answered ${res.statusCode}`))));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  try {
    const rows: (string | number)[][] = [];
    let round = 0;
    for (const concurrency of [1, 16]) {
      const plain = await medianOf(options.runs, () => measure(options.ops, concurrency, () => call('plain')));
      round += 1;
      const prefix = `k${round}`;
      const first = await medianOf(options.runs, (run) =>
        measure(options.ops, concurrency, (i) => call('keyed', `${prefix}-${run}-${i}`)),
      );
      const replay = await medianOf(options.runs, () => measure(options.ops, concurrency, (i) => call('keyed', `${prefix}-0-${i}`)));
      rows.push([`plain mutation, c=${concurrency}`, plain.opsPerSecond, plain.p50Ms, plain.p99Ms, '1.00']);
      rows.push([`idempotent, first call, c=${concurrency}`, first.opsPerSecond, first.p50Ms, first.p99Ms, (first.opsPerSecond / plain.opsPerSecond).toFixed(2)]);
      rows.push([`idempotent, replay, c=${concurrency}`, replay.opsPerSecond, replay.p50Ms, replay.p99Ms, (replay.opsPerSecond / plain.opsPerSecond).toFixed(2)]);
    }
    printTable(
      `tRPC over HTTP (${options.ops} requests per measurement, median of ${options.runs})`,
      ['operation', 'req/s', 'p50 ms', 'p99 ms', 'vs plain'],
      rows,
    );
  } finally {
    server.close();
    agent.destroy();
    await db.close();
    await database.close();
  }
}
