/**
 * A one-call workflow for the effect record's crash tests, in three kinds:
 * plain (the callee dedupes on the key), reconcile (an unknown outcome is
 * looked up by the key) and once (atMostOnce: an unknown outcome stops the
 * run for review).
 *
 *   node --import tsx call-crash.ts run <db> <payments> <variant> <scope> <key>
 *        runs it; prints RESULT <json>, or REVIEW when the run needs review
 *
 * The app module for `stepkey resolve --app` is call-crash.app.ts.
 */
import { z } from 'zod';
import { connect } from '../../../src/db/connect.js';
import { createEngine } from '../../../src/engine/engine.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { charge, findCharge } from '../../../workflows/payments/client.js';
import { PATIENCE_MS } from '../patience.js';

export const MERCHANT = 'call-crash-shop';
export const variants = ['plain', 'reconcile', 'once'] as const;
export type Variant = (typeof variants)[number];

export function callCrash(paymentsUrl: string, variant: Variant) {
  return defineWorkflow({
    name: `call-crash-${variant}`,
    version: 1,
    input: z.object({ cents: z.number().int().positive() }),
    steps: {
      charge: step('charge.v1', {
        output: z.object({ paymentId: z.string() }),
        retry: { attempts: 5, initialDelayMs: 50 },
        timeoutMs: PATIENCE_MS,
        ...(variant === 'reconcile'
          ? {
              reconcile: async ({ key, signal }) => {
                const made = await findCharge(paymentsUrl, MERCHANT, key, { signal });
                return made ? { paymentId: made.id } : undefined;
              },
            }
          : {}),
        ...(variant === 'once' ? { atMostOnce: true } : {}),
      }),
    },
    async run({ input, steps, ctx }) {
      return steps.charge.call(async ({ key, signal }) => {
        const made = await charge(paymentsUrl, MERCHANT, { amountCents: input.cents, currency: 'EUR', reference: ctx.rootKey }, { idempotencyKey: key, signal });
        return { paymentId: made.id };
      });
    },
  });
}

async function main(): Promise<void> {
  const [mode, url, paymentsUrl, variant, scope, key] = process.argv.slice(2) as [string, string, string, Variant, string, string];
  const database = connect(url, { max: 4 });
  const workflow = callCrash(paymentsUrl, variant);
  const engine = createEngine({ database, workflows: [workflow], onError: () => {} });
  if (mode === 'run') {
    const ref = { scope, key };
    for (;;) {
      const attempt = await engine.attempt(workflow, ref, { cents: 700 }).catch((error: unknown) => ({ state: 'error' as const, error }));
      if (attempt.state === 'completed') {
        console.log(`RESULT ${JSON.stringify(attempt.output)}`);
        break;
      }
      if ((attempt.state === 'running' || attempt.state === 'needs_review') && (await engine.get(ref))?.status === 'needs_review') {
        console.log('REVIEW');
        break;
      }
      if (attempt.state !== 'running' && attempt.state !== 'needs_review') {
        console.log(`ERROR ${JSON.stringify(attempt)}`);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  await engine.shutdown();
  await database.close();
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
