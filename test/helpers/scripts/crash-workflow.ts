/**
 * A three-step workflow for crash tests — a tx step, a call step to the
 * stand-in payment service, another tx step — and a process that runs it.
 *
 *   node --import tsx crash-workflow.ts run   <db> <payments> <scope> <key>   runs it, prints RESULT <json>
 *   node --import tsx crash-workflow.ts start <db> <payments> <scope> <key>   the same through engine.start(), whose
 *                                                                            start commits before the first step
 *   node --import tsx crash-workflow.ts sweep <db> <payments>                 resumes expired runs until killed
 *
 * Fault points arrive in STEPKEY_FAULTS; lease and sweep interval in
 * STEPKEY_LEASE_MS and STEPKEY_SWEEP_INTERVAL_MS.
 */
import { z } from 'zod';
import { connect } from '../../../src/db/connect.js';
import { createEngine } from '../../../src/engine/engine.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { charge } from '../../../workflows/payments/client.js';
import { PATIENCE_MS } from '../patience.js';

export const MERCHANT = 'crash-shop';

export function crashOrder(paymentsUrl: string) {
  return defineWorkflow({
    name: 'crash-order',
    version: 1,
    input: z.object({ sku: z.string(), quantity: z.number().int().positive() }),
    steps: {
      reserve: step('reserve.v1', { output: z.object({ reservation: z.string() }) }),
      charge: step('charge.v1', {
        output: z.object({ paymentId: z.string() }),
        retry: { attempts: 10, initialDelayMs: 50 },
        timeoutMs: PATIENCE_MS,
      }),
      ship: step('ship.v1', { output: z.object({ shipment: z.string() }) }),
    },
    async run({ input, steps, ctx }) {
      const { reservation } = await steps.reserve.tx(async (_db, { sql }) => {
        await sql`insert into crash_reservations (run_key, sku, quantity) values (${ctx.rootKey}, ${input.sku}, ${input.quantity})`;
        return { reservation: `${input.sku}x${input.quantity}` };
      });
      const { paymentId } = await steps.charge.call(async ({ key, signal }) => {
        const made = await charge(
          paymentsUrl,
          MERCHANT,
          { amountCents: 100 * input.quantity, currency: 'EUR', reference: ctx.rootKey },
          { idempotencyKey: key, signal },
        );
        return { paymentId: made.id };
      });
      const { shipment } = await steps.ship.tx(async (_db, { sql }) => {
        await sql`insert into crash_shipments (run_key, payment_id) values (${ctx.rootKey}, ${paymentId})`;
        return { shipment: `ship-${paymentId}` };
      });
      return { reservation, paymentId, shipment };
    },
  });
}

async function main(): Promise<void> {
  const [mode, url, paymentsUrl, scope, key] = process.argv.slice(2) as [string, string, string, string, string];
  const database = connect(url, { max: 4 });
  const workflow = crashOrder(paymentsUrl);
  const engine = createEngine({ database, workflows: [workflow], onError: () => {} });
  if (mode === 'run' || mode === 'start') {
    process.once('SIGTERM', () => {
      void engine.shutdown().then(() => process.exit(0));
    });
    const input = { sku: 'sku-1', quantity: 2 };
    const result =
      mode === 'run'
        ? await engine.run(workflow, { scope, key }, input)
        : await (await engine.start(workflow, { scope, key }, input)).result();
    console.log(`RESULT ${JSON.stringify(result)}`);
    await engine.shutdown();
    await database.close();
  } else if (mode === 'sweep') {
    engine.startSweeper();
    console.log('SWEEPER READY');
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
