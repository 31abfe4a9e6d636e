// test/guide/http-hono.ts — an order workflow behind a Hono route, keyed with stepkey/http
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { z } from 'zod';
import { connect, createEngine, defineWorkflow, Ledger, step } from 'stepkey';
import { createFetchIdempotency } from 'stepkey/http';

const placeOrder = defineWorkflow({
  name: 'place-order',
  version: 1,
  input: z.object({ sku: z.string(), quantity: z.number().int().positive() }),
  steps: { record: step('record-order.v1', { output: z.object({ orderId: z.number() }) }) },
  async run({ input, steps, ctx }) {
    return steps.record.tx(async (_db, { sql }) => {
      const [row] = await sql`
        insert into orders (tenant, sku, quantity)
        values (${ctx.scope}, ${input.sku}, ${input.quantity})
        returning id`;
      return { orderId: Number(row!.id) };
    });
  },
});

type Env = { Variables: { tenant: string | undefined } };

const database = connect(process.env.DATABASE_URL!);
const engine = createEngine({ database, workflows: [placeOrder] });
const idempotency = createFetchIdempotency<{ get(name: 'tenant'): string | undefined }>({
  ledger: new Ledger({ sql: database.sql }),
  engine,
  // Hono's context is the second argument: the tenant your authentication middleware set.
  scope: (_request, c) => c?.get('tenant'),
});

// The run under the caller's key: its result (201 here), 202 while it waits,
// its stored outcome on every replay.
const orders = idempotency.workflow(placeOrder, {
  route: 'orders.place',
  respond: ({ output }) => ({
    status: 201,
    headers: { location: `/v1/orders/${output.orderId}` },
    body: output,
  }),
});

const app = new Hono<Env>();
app.use(async (c, next) => {
  // Your real authentication.
  c.set('tenant', /^Bearer (\w+)$/.exec(c.req.header('authorization') ?? '')?.[1]);
  await next();
});
app.post('/v1/orders', (c) => orders(c.req.raw, c));

serve({ fetch: app.fetch, port: 3000 });
