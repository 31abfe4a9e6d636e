/**
 * A small tRPC app over real HTTP for the idempotency tests: the caller is the
 * bearer token, writes go to `trpc_orders` through ctx.idempotency. The
 * workflow router is built on a base procedure that refuses the caller
 * `tenant-blocked`; `{ info: false }` leaves tRPC's request info out of ctx.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TRPCError, initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import type { TRPCRequestInfo } from '@trpc/server/http';
import { z } from 'zod';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { createWorkflowRouter } from '../../src/trpc/workflow-router.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import type { TestDatabase } from './database.js';
import { testEngine } from './engine.js';

export interface AppContext {
  req: IncomingMessage;
  res: ServerResponse;
  info?: TRPCRequestInfo;
  tenant: string | null;
}

export const counters = { create: 0, refund: 0, place: 0, forget: 0, early: 0, hold: 0 };

/** Gates a resolver or step can wait on (input.gate), opened by the test. */
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

export const placeOrder = defineWorkflow({
  name: 'trpc-place-order',
  version: 1,
  input: z.object({ sku: z.string(), quantity: z.number().int().positive(), gate: z.string().optional() }),
  steps: { record: step('record.v1', { output: z.object({ orderId: z.number() }) }) },
  async run({ input, steps, ctx }) {
    const { orderId } = await steps.record.tx(async (_db, { sql }) => {
      counters.place += 1;
      if (input.gate) await gate(input.gate).promise;
      if (input.sku === 'sold-out') throw new NonRetryableError(`${input.sku} is sold out`, { code: 'PRECONDITION_FAILED' });
      const [row] = await sql`insert into trpc_orders (tenant, sku, quantity) values (${ctx.scope}, ${input.sku}, ${input.quantity}) returning id`;
      return { orderId: Number(row!.id) };
    });
    return { orderId, sku: input.sku };
  },
});

/** Records the order, then holds at a call until its gate opens: a run whose start has committed, still running. */
export const holdOrder = defineWorkflow({
  name: 'trpc-hold-order',
  version: 1,
  input: z.object({ sku: z.string(), gate: z.string() }),
  steps: { record: step('hold-record.v1'), hold: step('hold.v1') },
  async run({ input, steps }) {
    await steps.record.tx(async () => input.sku);
    await steps.hold.call(async () => {
      counters.hold += 1;
      await gate(input.gate).promise;
      return 'released';
    });
    return { sku: input.sku };
  },
});

export function buildApp(ledger: Ledger, engine: Engine, options: { info?: boolean } = {}) {
  const t = initTRPC.context<AppContext>().create({ isDev: false });
  const idem = createIdempotency<AppContext>({ ledger, engine, scope: (ctx) => ctx.tenant });
  const orderInput = z.object({ sku: z.string(), quantity: z.number().int().positive(), note: z.string().optional() });
  // What an app's auth or rate-limit middleware does: refuse before anything else runs.
  const guarded = t.procedure.use(({ ctx, next }) => {
    if (ctx.tenant === 'tenant-blocked') throw new TRPCError({ code: 'FORBIDDEN', message: 'tenant-blocked may not call this.' });
    return next();
  });

  const router = t.router({
    orders: t.router({
      create: t.procedure
        .input(orderInput.extend({ gate: z.string().optional(), fail: z.string().optional() }))
        .use(idem.procedure())
        .mutation(async ({ ctx, input }) => {
          counters.create += 1;
          const sql = ctx.idempotency!.sql;
          const [row] = await sql`insert into trpc_orders (tenant, sku, quantity) values (${ctx.idempotency!.scope}, ${input.sku}, ${input.quantity}) returning id`;
          if (input.gate) await gate(input.gate).promise;
          if (input.fail === 'client') throw new TRPCError({ code: 'NOT_FOUND', message: `no product ${input.sku}` });
          if (input.fail === 'conflict') throw new TRPCError({ code: 'CONFLICT', message: 'try again' });
          if (input.fail === 'crash') throw new Error('database exploded');
          if (input.fail === 'permanent') throw new NonRetryableError('card declined', { code: 'PRECONDITION_FAILED' });
          if (input.fail === 'disconnect') await sql`select pg_terminate_backend(pg_backend_pid())`;
          return { orderId: Number(row!.id), sku: input.sku, zeta: 1, alpha: [3, 1, 2] };
        }),
      refund: t.procedure.input(orderInput).use(idem.procedure()).mutation(async () => {
        counters.refund += 1;
        return { refunded: true };
      }),
      note: t.procedure
        .input(z.object({ text: z.string() }))
        .use(idem.procedure({ mode: 'optional' }))
        .mutation(({ ctx, input }) => ({ text: input.text, keyed: ctx.idempotency !== undefined })),
      bestEffort: t.procedure
        .input(z.object({ text: z.string() }))
        .use(idem.procedure({ onLedgerDown: 'open' }))
        .mutation(({ ctx, input }) => ({ text: input.text, bypassed: ctx.idempotency?.bypassed ?? false })),
      probe: t.procedure
        .input(z.object({ text: z.string() }))
        .use(idem.procedure({ onLedgerDown: 'open' }))
        .mutation(({ ctx }) => ({ fields: Object.keys(ctx.idempotency).sort() })),
      forget: t.procedure
        .input(z.object({ sku: z.string() }))
        .use(idem.procedure())
        .mutation(async ({ ctx, input }) => {
          counters.forget += 1;
          await ctx.idempotency.sql`insert into trpc_orders (tenant, sku, quantity) values (${ctx.idempotency.scope}, ${input.sku}, 1)`;
        }),
      // Misconfigured on purpose: the middleware runs before the input is validated.
      early: t.procedure
        .use(idem.procedure())
        .input(orderInput)
        .mutation(({ input }) => {
          counters.early += 1;
          return { sku: input.sku, quantity: input.quantity };
        }),
      earlyPlace: t.procedure
        .use(idem.workflow(placeOrder))
        .input(placeOrder.input)
        .mutation(({ ctx }) => ctx.run.output),
      place: t.procedure
        .input(placeOrder.input)
        .use(idem.workflow(placeOrder))
        .mutation(({ ctx }) => ({ ...ctx.run.output, replayed: ctx.run.replayed })),
      hold: t.procedure
        .input(holdOrder.input)
        .use(idem.workflow(holdOrder))
        .mutation(({ ctx }) => ctx.run.output),
    }),
    workflows: t.router(createWorkflowRouter(t, idem, { place: placeOrder }, { procedure: guarded })),
  });

  const server = createHTTPServer({
    router,
    basePath: '/trpc/',
    createContext: ({ req, res, info }): AppContext => ({
      req,
      res,
      ...(options.info === false ? {} : { info }),
      tenant: /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null,
    }),
  });
  return { router, server, t, idem };
}

export type AppRouter = ReturnType<typeof buildApp>['router'];

export async function listen(server: ReturnType<typeof createHTTPServer>): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/trpc`;
}

export interface ServedApp {
  url: string;
  app: ReturnType<typeof buildApp>;
  engine: Engine;
  close(): Promise<void>;
}

/** The app on a test database: its `trpc_orders` table, an engine, a ledger, listening on a free port. */
export async function serveApp(db: TestDatabase): Promise<ServedApp> {
  await db.sql`create table trpc_orders (id bigserial primary key, tenant text not null, sku text not null, quantity int not null)`;
  const engine = testEngine(db, [placeOrder, holdOrder]);
  const app = buildApp(new Ledger({ sql: db.sql }), engine);
  const url = await listen(app.server);
  return {
    url,
    app,
    engine,
    async close() {
      app.server.close();
      await engine.shutdown();
    },
  };
}
