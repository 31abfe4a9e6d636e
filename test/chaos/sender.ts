/**
 * The chaos suite's event sender: a process of its own (a pool of 8 and an
 * engine, as an app server that sends events would have) with a workflow that
 * lives only here — 50 runs, each waiting for 13 events one after another —
 * and a sender per run that sends its events spread over the fault window,
 * each with a key of its own, retrying every refusal until it is answered.
 * The runs its sends wake continue in this process; its sweeper wakes the
 * ones a send could not wake at once.
 *
 *   (env) CHAOS_DATABASE_URL, CHAOS_SEND_WINDOW_MS
 *   stdout: READY · SENT <answered> <total> (every few seconds) · FINAL <json> (on SIGTERM)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { poolHealth } from '../../src/db/pool-health.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { Engine } from '../../src/engine/engine.js';
import { EVENTS_PER_RUN, SENDER_RUNS, SENDER_SCOPE, senderWorkflowName, type SenderFinal } from './sender-load.js';


const waiter = defineWorkflow({
  name: senderWorkflowName,
  version: 1,
  input: z.object({}),
  events: { tick: z.object({ n: z.number().int() }) },
  steps: { tick: step('tick.v1'), tally: step('tally.v1') },
  async run({ steps }) {
    let sum = 0;
    for (let i = 0; i < EVENTS_PER_RUN; i += 1) sum += (await steps.tick.waitForEvent('tick', { id: String(i) })).payload.n;
    await steps.tally.tx(async () => {});
    return sum;
  },
});

async function main(): Promise<void> {
  const url = process.env.CHAOS_DATABASE_URL;
  if (!url) throw new Error('CHAOS_DATABASE_URL is not set');
  const windowMs = Number(process.env.CHAOS_SEND_WINDOW_MS ?? 60_000);
  const database = connect(url, { max: 8, applicationName: 'chaos-sender' });
  const engine = new Engine({ database, workflows: [waiter], logger: false, onError: () => {} });
  engine.startSweeper();
  const refs = Array.from({ length: SENDER_RUNS }, (_, i) => ({ scope: SENDER_SCOPE, key: `waiter-${i}` }));
  for (const ref of refs) {
    for (;;) {
      try {
        await engine.start(waiter, ref, {});
        break;
      } catch {
        await sleep(200);
      }
    }
  }
  console.log('READY');
  let answered = 0;
  const refusals = new Map<string, number>();
  const gapMs = windowMs / EVENTS_PER_RUN;
  const senders = refs.map(async (ref, r) => {
    await sleep(Math.random() * gapMs);
    for (let n = 0; n < EVENTS_PER_RUN; n += 1) {
      for (;;) {
        try {
          await engine.send(ref as never, 'tick' as never, { n } as never, { key: `tick-${r}-${n}` });
          answered += 1;
          break;
        } catch (error) {
          const code = (error as { code?: string }).code ?? 'unknown';
          refusals.set(code, (refusals.get(code) ?? 0) + 1);
          await sleep(200 + Math.random() * 300);
        }
      }
      await sleep(gapMs * (0.5 + Math.random()));
    }
  });
  const progress = setInterval(() => console.log(`SENT ${answered} ${SENDER_RUNS * EVENTS_PER_RUN}`), 5_000);
  const done = Promise.all(senders).then(() => console.log(`SENT ${answered} ${SENDER_RUNS * EVENTS_PER_RUN}`));
  process.once('SIGTERM', () => {
    clearInterval(progress);
    const final: SenderFinal = { answered, total: SENDER_RUNS * EVENTS_PER_RUN, refusals: Object.fromEntries(refusals), health: poolHealth(database.sql) };
    console.log(`FINAL ${JSON.stringify(final)}`);
    void engine
      .close({ timeoutMs: 5_000 })
      .then(() => database.close())
      .finally(() => process.exit(0));
  });
  await done;
}

main().catch((error: unknown) => {
  console.error(`sender failed: ${error instanceof Error ? error.stack : String(error)}`);
  process.exit(1);
});
