/**
 * The order API. `orders.create` runs the checkout workflow behind an
 * Idempotency-Key: the request and its run are one ledger row, and every
 * replay renders the stored result.
 */
import { TRPCError, initTRPC } from '@trpc/server';
import { and, desc, eq } from 'drizzle-orm';
import { z } from 'zod';
import { Ledger, type Database, type Engine } from 'stepkey';
import { createIdempotency } from 'stepkey/trpc';
import { checkout, checkoutInput } from '../checkout.js';
import { orders } from '../db/schema.js';
import type { ApiContext } from './context.js';

export function createApiRouter(database: Database, engine: Engine) {
  const t = initTRPC.context<ApiContext>().create({ isDev: false });
  const idempotency = createIdempotency<ApiContext>({
    ledger: new Ledger({ sql: database.sql }),
    engine,
    scope: (ctx) => ctx.tenant,
  });
  // Authentication comes first: a refused caller never reaches the ledger.
  const authed = t.procedure.use(({ ctx, next }) => {
    if (!ctx.tenant) {
      throw new TRPCError({ code: 'UNAUTHORIZED', message: 'Send Authorization: Bearer <tenant>.' });
    }
    return next({ ctx: { tenant: ctx.tenant } });
  });
  const orderView = {
    orderId: orders.id,
    sku: orders.sku,
    quantity: orders.quantity,
    email: orders.email,
    status: orders.status,
    paymentId: orders.paymentId,
    createdAt: orders.createdAt,
  };

  return t.router({
    health: t.procedure.query(() => ({ ok: true })),
    orders: t.router({
      create: authed
        .input(checkoutInput)
        .use(idempotency.workflow(checkout))
        .mutation(({ ctx }) => ctx.run.output),
      get: authed.input(z.object({ orderId: z.number().int() })).query(async ({ ctx, input }) => {
        const [order] = await database.db
          .select(orderView)
          .from(orders)
          .where(and(eq(orders.tenant, ctx.tenant), eq(orders.id, input.orderId)));
        if (!order) throw new TRPCError({ code: 'NOT_FOUND', message: `No order ${input.orderId}.` });
        return order;
      }),
      list: authed
        .input(z.object({ limit: z.number().int().min(1).max(100).default(20) }).default({ limit: 20 }))
        .query(({ ctx, input }) =>
          database.db.select(orderView).from(orders).where(eq(orders.tenant, ctx.tenant)).orderBy(desc(orders.id)).limit(input.limit),
        ),
    }),
  });
}

export type ApiRouter = ReturnType<typeof createApiRouter>;
