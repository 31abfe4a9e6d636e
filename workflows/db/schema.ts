/**
 * The example application's own tables (generated into db/migrations by
 * drizzle-kit with workflows/drizzle.config.ts):
 *
 *   shop.stock      units available and unit price per SKU
 *   shop.orders     one row per order, written by the checkout workflow
 *   shop.mailbox    confirmation emails, written by the email consumer
 *   payments.charges  the stand-in payment service's charges
 *
 * In a real deployment the payment service is another company's system with
 * its own database; here it shares the server, not the tables.
 */
import { sql } from 'drizzle-orm';
import { bigserial, check, index, integer, pgSchema, text, timestamp, unique } from 'drizzle-orm/pg-core';

export const shop = pgSchema('shop');
export const payments = pgSchema('payments');

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'string' }).notNull().defaultNow();

export const stock = shop.table(
  'stock',
  {
    sku: text('sku').primaryKey(),
    available: integer('available').notNull(),
    priceCents: integer('price_cents').notNull(),
  },
  (t) => [check('stock_available_check', sql`${t.available} >= 0`)],
);

export const orders = shop.table(
  'orders',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    tenant: text('tenant').notNull(),
    /** The root key of the checkout run that created it: one order per run. */
    runKey: text('run_key').notNull(),
    sku: text('sku').notNull(),
    quantity: integer('quantity').notNull(),
    email: text('email').notNull(),
    status: text('status').notNull(),
    paymentId: text('payment_id'),
    createdAt: createdAt(),
  },
  (t) => [
    unique('orders_run_key_unique').on(t.runKey),
    index('orders_tenant_idx').on(t.tenant, t.id),
    check('orders_status_check', sql`${t.status} in ('reserved', 'paid')`),
  ],
);

export const mailbox = shop.table(
  'mailbox',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    tenant: text('tenant').notNull(),
    recipient: text('recipient').notNull(),
    subject: text('subject').notNull(),
    body: text('body').notNull(),
    /** The effect's derived key; the inbox dedupes on it too, this is the receiver's own record. */
    messageKey: text('message_key').notNull(),
    createdAt: createdAt(),
  },
  (t) => [unique('mailbox_message_key_unique').on(t.messageKey)],
);

export const charges = payments.table(
  'charges',
  {
    id: text('id').primaryKey(),
    merchant: text('merchant').notNull(),
    idempotencyKey: text('idempotency_key').notNull(),
    amountCents: integer('amount_cents').notNull(),
    currency: text('currency').notNull(),
    reference: text('reference').notNull(),
    createdAt: createdAt(),
  },
  (t) => [index('charges_reference_idx').on(t.reference)],
);
