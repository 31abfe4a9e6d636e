/**
 * Worker processes killed mid-delivery: every effect is applied exactly once,
 * a killed worker's jobs run again once another worker finds its pool dead
 * (not after graphile-worker's four hours), and SIGTERM drains in-flight jobs
 * and exits 0.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { fanout, recordEffect, webhookEffect } from '../helpers/scripts/worker-child.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 40 });
const script = fileURLToPath(new URL('../helpers/scripts/worker-child.ts', import.meta.url));
const children: ChildHandle[] = [];
let receiver: Server;
let receiverUrl = '';
const hits = new Map<string, number>();

beforeAll(async () => {
  await db().sql`create table received (message_key text not null, note text not null)`;
  await db().sql`create table webhook_applied (message_key text not null)`;
  const ledger = new Ledger({ sql: db().sql });
  // The receiving service: applies each Idempotency-Key once, replays the rest.
  receiver = createServer((req, res) => {
    const key = String(req.headers['idempotency-key']);
    hits.set(key, (hits.get(key) ?? 0) + 1);
    req.resume();
    req.on('end', async () => {
      const result = await ledger.once({ scope: 'receiver', key, fingerprint: 'hook' }, async ({ sql }) => {
        await sql`insert into webhook_applied (message_key) values (${key})`;
        return { ok: true };
      });
      res.writeHead(200, result.state === 'replay' ? { 'idempotent-replayed': 'true' } : {});
      res.end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});

afterAll(async () => {
  for (const child of children) child.kill();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
});

function startWorker(options: { faults?: string; concurrency?: number } = {}): ChildHandle {
  const child = spawnScript(script, {
    args: [db().url, receiverUrl],
    env: { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200', WORKER_CONCURRENCY: String(options.concurrency ?? 10) },
    ...(options.faults ? { faults: options.faults } : {}),
  });
  children.push(child);
  return child;
}

const count = async (query: Promise<{ n: number }[]>) => (await query)[0]!.n;

describe('worker crashes', () => {
  it('runs a killed worker’s job again once its pool is found dead; the receiver is called twice and applies once', async () => {
    const doomed = startWorker({ faults: 'outbox.after-apply:test.webhook' });
    const [, doomedPool] = (await doomed.waitFor(/WORKER READY (\S+)/, PATIENCE_MS)) as unknown as [string, string];
    const { key } = await enqueueEffect(db().sql, webhookEffect(receiverUrl), { event: 'order.paid' }, {
      scope: 'acme',
      key: uniqueKey('hook'),
    });
    expect((await doomed.exited).signal).toBe('SIGKILL');
    expect(hits.get(key)).toBe(1);
    const [locked] = await db().sql`select locked_by from graphile_worker.jobs where key = ${key}`;
    expect(locked!.locked_by).toBe(doomedPool);

    const rescuer = startWorker();
    await rescuer.waitFor(/WORKER READY/, PATIENCE_MS);
    await expect
      .poll(() => count(db().sql`select count(*)::int as n from graphile_worker.jobs where key = ${key}`))
      .toBe(0);
    // Run again because the rescuer found the killed pool silent and unlocked its jobs: graphile-worker
    // alone would have left the job locked for four hours.
    const [dead] = await db().sql`select unlocked_at is not null as unlocked from stepkey.worker_pools where pool_id = ${doomedPool}`;
    expect(dead).toEqual({ unlocked: true });
    expect(hits.get(key)).toBe(2);
    expect(await count(db().sql`select count(*)::int as n from webhook_applied where message_key = ${key}`)).toBe(1);
    rescuer.kill('SIGTERM');
    expect((await rescuer.exited).code).toBe(0);
  });

  it('applies 1,000 effects from concurrent workflows exactly once with one of two workers SIGKILLed mid-way', async () => {
    const a = startWorker({ concurrency: 10 });
    const b = startWorker({ concurrency: 10 });
    const [[, poolA]] = (await Promise.all([a.waitFor(/WORKER READY (\S+)/, PATIENCE_MS), b.waitFor(/WORKER READY/, PATIENCE_MS)])) as unknown as [
      [string, string],
    ];
    const engine = testEngine(db(), [fanout]);
    const prefix = uniqueKey('fan');
    let next = 0;
    const enqueue = Promise.all(
      Array.from({ length: 25 }, async () => {
        while (next < 1000) {
          const n = next++;
          await engine.run(fanout, { scope: 'acme', key: `${prefix}-${n}` }, { n, sleepMs: 2 });
        }
      }),
    );
    const received = () => count(db().sql`select count(*)::int as n from received where note like 'effect %'`);
    await expect.poll(received, { interval: 50 }).toBeGreaterThanOrEqual(250);
    a.kill('SIGKILL');
    await a.exited;
    await enqueue;
    await expect.poll(received, { interval: 200 }).toBeGreaterThanOrEqual(1000);
    const [totals] = await db().sql`
      select count(*)::int as total, count(distinct message_key)::int as distinct_keys
        from received where note like 'effect %'`;
    expect(totals).toEqual({ total: 1000, distinct_keys: 1000 });
    // A job's row goes once a worker records its result: a moment after its effect applied, or — a
    // job the killed worker applied but had not marked done — once its pool is found dead and the
    // job runs again (its effect deduplicated), as in the test above.
    await expect
      .poll(() => count(db().sql`select count(*)::int as n from graphile_worker.jobs where task_identifier = 'test.record'`))
      .toBe(0);
    // The survivor finds the killed pool silent and unlocks what it held.
    await expect
      .poll(async () => (await db().sql`select unlocked_at is not null as unlocked from stepkey.worker_pools where pool_id = ${poolA}`)[0]?.unlocked)
      .toBe(true);
    await engine.shutdown();
    b.kill('SIGTERM');
    expect((await b.exited).code).toBe(0);
  });

  it('drains in-flight jobs on SIGTERM, exits 0 and leaves nothing locked', async () => {
    const worker = startWorker({ concurrency: 4 });
    const [, poolId] = (await worker.waitFor(/WORKER READY (\S+)/, PATIENCE_MS)) as unknown as [string, string];
    const prefix = uniqueKey('drain');
    for (let n = 0; n < 20; n += 1) {
      await enqueueEffect(db().sql, recordEffect, { note: `drain ${n}`, sleepMs: 400 }, { scope: 'acme', key: `${prefix}-${n}` });
    }
    await expect
      .poll(() => count(db().sql`select count(*)::int as n from graphile_worker.jobs where locked_by is not null`))
      .toBeGreaterThan(0);
    worker.kill('SIGTERM');
    const exit = await worker.exited;
    expect(exit.code).toBe(0);
    expect(await count(db().sql`select count(*)::int as n from graphile_worker.jobs where locked_by is not null`)).toBe(0);
    expect(
      await count(db().sql`select count(*)::int as n from graphile_worker.jobs where last_error is not null and task_identifier = 'test.record'`),
    ).toBe(0);
    const [pool] = await db().sql`select stopped_at from stepkey.worker_pools where pool_id = ${poolId}`;
    expect(pool!.stopped_at).not.toBeNull();
    const done = await count(db().sql`select count(*)::int as n from received where note like 'drain %'`);
    const left = await count(db().sql`select count(*)::int as n from graphile_worker.jobs where task_identifier = 'test.record'`);
    expect(done + left).toBe(20);
  });
});
