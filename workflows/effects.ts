/**
 * The shop's effects. The confirmation email is written to the shop's
 * mailbox table, in the inbox transaction: a redelivered job never writes a
 * second email.
 */
import { z } from 'zod';
import { defineEffect } from 'stepkey';
import { mailbox } from './db/schema.js';

export const sendConfirmation = defineEffect({
  name: 'email.send-confirmation',
  payload: z.object({
    tenant: z.string(),
    to: z.string().email(),
    orderId: z.number().int(),
    paymentId: z.string(),
    sku: z.string(),
    quantity: z.number().int(),
  }),
  async handler(email, { db, key }) {
    await db.insert(mailbox).values({
      tenant: email.tenant,
      recipient: email.to,
      subject: `Order ${email.orderId} confirmed`,
      body: `${email.quantity} × ${email.sku} are on their way. Payment ${email.paymentId}.`,
      messageKey: key,
    });
  },
});
