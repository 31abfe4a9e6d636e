/**
 * The checkout workflow: reserve stock, charge the card, send the
 * confirmation, mark the order paid. Each step has its own name and so its
 * own key, derived from the request's scope (the tenant) and
 * Idempotency-Key; a retry replays the finished steps and runs the rest.
 *
 *   reserve-stock.v1         tx: stock and the order row commit with the step (exactly once)
 *   charge-card.v1           call: the payment service, with the step's key as its Idempotency-Key;
 *                            a charge whose answer was lost is looked up by that key (reconcile)
 *   send-confirmation.v1     enqueue: the email job commits with the step (delivered once)
 *   mark-paid.v1             tx
 */
import { and, eq, gte, sql } from 'drizzle-orm';
import { z } from 'zod';
import { NonRetryableError, defineWorkflow, step } from 'stepkey';
import { config } from './config.js';
import { orders, stock } from './db/schema.js';
import { sendConfirmation } from './effects.js';
import { charge, findCharge } from './payments/client.js';

export const checkoutInput = z.object({
  sku: z.string().min(1).max(64),
  quantity: z.number().int().positive().max(100),
  email: z.string().email(),
});

export const checkout = defineWorkflow({
  name: 'checkout',
  version: 1,
  input: checkoutInput,
  output: z.object({ orderId: z.number(), paymentId: z.string(), status: z.literal('paid') }),
  steps: {
    reserve: step('reserve-stock.v1', { output: z.object({ orderId: z.number(), amountCents: z.number() }) }),
    charge: step('charge-card.v1', {
      output: z.object({ paymentId: z.string() }),
      retry: { attempts: 8, initialDelayMs: 200, maxDelayMs: 2_000 },
      timeoutMs: 10_000,
      // An earlier attempt may have charged the card without the answer reaching us: ask by the key.
      reconcile: async ({ key, scope, signal }) => {
        const made = await findCharge(config.paymentsUrl(), config.merchant(scope), key, { signal });
        return made ? { paymentId: made.id } : undefined;
      },
    }),
    confirm: step('send-confirmation.v1'),
    markPaid: step('mark-paid.v1'),
  },
  async run({ input, steps, ctx }) {
    const tenant = ctx.scope;
    const { orderId, amountCents } = await steps.reserve.tx(async (db) => {
      const [item] = await db
        .update(stock)
        .set({ available: sql`${stock.available} - ${input.quantity}` })
        .where(and(eq(stock.sku, input.sku), gte(stock.available, input.quantity)))
        .returning({ priceCents: stock.priceCents });
      if (!item) {
        throw new NonRetryableError(`Not enough stock of ${input.sku} for ${input.quantity}.`, { code: 'OUT_OF_STOCK' });
      }
      const [order] = await db
        .insert(orders)
        .values({ tenant, runKey: ctx.rootKey, sku: input.sku, quantity: input.quantity, email: input.email, status: 'reserved' })
        .returning({ id: orders.id });
      return { orderId: order!.id, amountCents: item.priceCents * input.quantity };
    });

    const { paymentId } = await steps.charge.call(async ({ key, signal }) => {
      const made = await charge(
        config.paymentsUrl(),
        config.merchant(tenant),
        { amountCents, currency: 'EUR', reference: `order-${orderId}` },
        { idempotencyKey: key, signal },
      );
      return { paymentId: made.id };
    });

    await steps.confirm.enqueue(sendConfirmation, {
      tenant,
      to: input.email,
      orderId,
      paymentId,
      sku: input.sku,
      quantity: input.quantity,
    });

    await steps.markPaid.tx(async (db) => {
      await db.update(orders).set({ status: 'paid', paymentId }).where(eq(orders.id, orderId));
    });

    return { orderId, paymentId, status: 'paid' as const };
  },
});
