/**
 * The process the Citus kill test SIGKILLs: an engine, its sweeper and an
 * effect worker on the coordinator, running keyed orders — a tx step writing
 * the app's table distributed by tenant (co-located with stepkey's rows), a
 * call to the stand-in payment service, an effect enqueued — eight at a time,
 * each retried with its key until it answers.
 *
 *   node --import tsx citus-kill-load.ts <db> <payments> <count> <tenants>
 *
 * Prints `DONE <n>` as orders answer and `ALL DONE` when every key has.
 */
import { z } from 'zod';
import { connect } from '../../../src/db/connect.js';
import { createEngine } from '../../../src/engine/engine.js';
import { defineEffect } from '../../../src/outbox/effect.js';
import { runWorker } from '../../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { charge } from '../../../workflows/payments/client.js';

export const KILL_MERCHANT = 'citus-kill-shop';

export const received = defineEffect({
  name: 'kill.receipt',
  payload: z.object({ order: z.string() }),
  async handler(payload, { sql, key }) {
    await sql`insert into kill_receipts (message_key, order_id) values (${key}, ${payload.order})`;
  },
});

export function killOrder(paymentsUrl: string) {
  return defineWorkflow({
    name: 'kill-order',
    version: 1,
    input: z.object({ order: z.string(), cents: z.number().int().positive() }),
    steps: {
      record: step('record.v1'),
      charge: step('charge.v1', { output: z.object({ paymentId: z.string() }), retry: { attempts: 20, initialDelayMs: 50 } }),
      receipt: step('receipt.v1'),
    },
    async run({ input, steps, ctx }) {
      await steps.record.tx(async (_db, { sql }) => {
        await sql`insert into kill_orders (tenant, order_id, cents) values (${ctx.scope}, ${input.order}, ${input.cents})`;
      });
      const { paymentId } = await steps.charge.call(async ({ key, signal }) => {
        const made = await charge(paymentsUrl, KILL_MERCHANT, { amountCents: input.cents, currency: 'EUR', reference: ctx.rootKey }, { idempotencyKey: key, signal });
        return { paymentId: made.id };
      });
      await steps.receipt.enqueue(received, { order: input.order });
      return { paymentId };
    },
  });
}

export const killRef = (i: number, tenants: number) => ({ scope: `tenant-${i % tenants}`, key: `order-${i}` });

async function main(): Promise<void> {
  const [url, paymentsUrl, count, tenants] = process.argv.slice(2) as [string, string, string, string];
  const database = connect(url, { max: 12 });
  const workflow = killOrder(paymentsUrl);
  const engine = createEngine({ database, workflows: [workflow], onError: () => {} });
  engine.startSweeper();
  // A short lease: the jobs a killed process had locked are taken back by the next one soon.
  await runWorker({ database, effects: [received], concurrency: 2, leaseMs: 2_000, onError: () => {} });
  const left = Array.from({ length: Number(count) }, (_, i) => i);
  let done = 0;
  const one = async (i: number): Promise<void> => {
    for (;;) {
      try {
        await engine.run(workflow, killRef(i, Number(tenants)), { order: `order-${i}`, cents: 100 + i });
        console.log(`DONE ${++done}`);
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let i = left.shift(); i !== undefined; i = left.shift()) await one(i);
    }),
  );
  console.log('ALL DONE');
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
