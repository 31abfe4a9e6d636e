/**
 * stepkey's logs: JSON lines with a level, through a real pino instance the
 * app passes — takeovers, resumes, retries, unknown outcomes, deliveries and
 * dead worker pools unlocked, each error with its cause chain.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Clock } from '../../src/db/clock.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const engines: Engine[] = [];
afterAll(async () => {
  for (const engine of engines) await engine.close({ timeoutMs: 2_000 });
});

/** A pino logger writing to memory: every line it wrote, parsed. */
function capturedLogger() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

describe('logs', () => {
  it('logs takeovers, resumes, retries and unknown outcomes as JSON lines with a level', async () => {
    const { logger, lines } = capturedLogger();
    let release!: () => void;
    const hung = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const pay = defineWorkflow({
      name: 'logged-pay',
      version: 1,
      input: z.object({}),
      steps: { pay: step('pay.v1', { retry: { attempts: 3, initialDelayMs: 10 } }) },
      async run({ steps }) {
        return steps.pay.call(async () => {
          calls += 1;
          if (calls === 1) await hung;
          if (calls === 2) throw new Error('provider down', { cause: new Error('connect ECONNREFUSED') });
          return 'paid';
        });
      },
    });
    const a = testEngine(db(), [pay], { leaseMs: 60_000, heartbeatMs: 60_000, logger: false });
    const late = new Clock();
    late.advance(120_000);
    const b = testEngine(db(), [pay], { clock: late, logger });
    engines.push(a, b);
    const ref = { scope: 'acme', key: uniqueKey('logged') };
    await a.start(pay, ref, {});
    await expect.poll(() => calls).toBe(1);
    expect(await b.sweep()).toBe(1);
    await expect.poll(async () => (await b.get(ref))?.status).toBe('completed');
    release();
    const events = lines.map((line) => line.event);
    expect(events).toEqual(expect.arrayContaining(['run.takeover', 'run.resumed', 'call.unknown_outcome', 'step.retry']));
    const byEvent = (event: string) => lines.find((line) => line.event === event)!;
    expect(byEvent('run.takeover')).toMatchObject({ level: 30, scope: 'acme', run: ref.key, msg: expect.stringContaining('lease expired') });
    expect(byEvent('call.unknown_outcome')).toMatchObject({ level: 40, step: 'pay.v1', attempts: [1] });
    expect(byEvent('step.retry')).toMatchObject({ level: 30, error: { message: 'provider down', cause: { message: 'connect ECONNREFUSED' } } });
  });

  it('logs deliveries and dead worker pools unlocked', async () => {
    const { logger, lines } = capturedLogger();
    const note = defineEffect({ name: 'logged.note', payload: z.object({ n: z.number() }), async handler() {} });
    await db().sql`insert into stepkey.worker_pools (pool_id, hostname, pid, last_beat_at) values ('pool-dead-one', 'gone', 1, now() - interval '1 hour')`;
    const worker = await runWorker({ database: db(), effects: [note], leaseMs: 600, purgeSchedule: false, onError: () => {}, logger });
    try {
      await enqueueEffect(db().sql, note, { n: 1 }, { scope: 'acme', key: uniqueKey('note') });
      await expect.poll(() => lines.some((line) => line.event === 'effect.delivery')).toBe(true);
      await expect.poll(() => lines.some((line) => line.event === 'worker.dead_pool_unlocked')).toBe(true);
    } finally {
      await worker.stop();
    }
    expect(lines.find((line) => line.event === 'effect.delivery')).toMatchObject({ level: 30, effect: 'logged.note', result: 'applied' });
    expect(lines.find((line) => line.event === 'worker.dead_pool_unlocked')).toMatchObject({ level: 40, pool: 'pool-dead-one' });
  });
});
