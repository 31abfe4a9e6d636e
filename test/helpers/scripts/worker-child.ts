/**
 * A worker process for crash tests: consumes `test.record` (a row in
 * `received`, after `sleepMs`) and `test.webhook` (an HTTP delivery to the
 * receiver), resumes `fanout` runs, handles SIGTERM/SIGINT.
 *
 *   node --import tsx worker-child.ts <db url> <receiver url>   prints WORKER READY <pool id>
 *
 * Concurrency in WORKER_CONCURRENCY; lease in STEPKEY_LEASE_MS.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { deliverHttp } from '../../../src/outbox/deliver-http.js';
import { defineEffect } from '../../../src/outbox/effect.js';
import { runWorker } from '../../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { PATIENCE_MS } from '../patience.js';

export const recordEffect = defineEffect({
  name: 'test.record',
  payload: z.object({ note: z.string(), sleepMs: z.number().int().min(0).default(0) }),
  async handler(payload, { sql, key }) {
    if (payload.sleepMs > 0) await sleep(payload.sleepMs);
    await sql`insert into received (message_key, note) values (${key}, ${payload.note})`;
  },
});

export function webhookEffect(receiverUrl: string) {
  return defineEffect({
    name: 'test.webhook',
    payload: z.object({ event: z.string() }),
    async handler(payload, { key, signal }) {
      await deliverHttp(receiverUrl, payload, { key, signal, timeoutMs: PATIENCE_MS });
    },
  });
}

export const fanout = defineWorkflow({
  name: 'fanout',
  version: 1,
  input: z.object({ n: z.number().int(), sleepMs: z.number().int().default(0) }),
  steps: { notify: step('notify.v1') },
  async run({ input, steps }) {
    return steps.notify.enqueue(recordEffect, { note: `effect ${input.n}`, sleepMs: input.sleepMs });
  },
});

async function main(): Promise<void> {
  const [url, receiverUrl] = process.argv.slice(2) as [string, string];
  const worker = await runWorker({
    database: url,
    effects: [recordEffect, webhookEffect(receiverUrl)],
    workflows: [fanout],
    concurrency: Number(process.env.WORKER_CONCURRENCY ?? 10),
    handleSignals: true,
    shutdownTimeoutMs: 20_000,
    onError: (error, context) => console.error(`worker error (${context}):`, (error as Error).message),
  });
  console.log(`WORKER READY ${worker.poolId}`);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
