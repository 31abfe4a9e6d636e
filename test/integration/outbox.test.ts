import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { inTransaction } from '../../src/db/transaction.js';
import { childKey } from '../../src/keys/derive.js';
import { deliverHttp } from '../../src/outbox/deliver-http.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { retryJobs } from '../../src/outbox/sql/jobs.js';
import { listJobs } from '../../src/read/sql/jobs.js';
import { runWorker, type Worker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 20 });

const record = defineEffect({
  name: 'test.record',
  payload: z.object({ note: z.string() }),
  async handler(payload, { sql, key }) {
    await sql`insert into received (message_key, note) values (${key}, ${payload.note})`;
  },
});

let receiverStatus = 200;
const receiverHits = new Map<string, number>();
let receiver: Server;
let receiverUrl = '';
const webhook = defineEffect({
  name: 'test.webhook',
  payload: z.object({ event: z.string() }),
  maxAttempts: 3,
  async handler(payload, { key, signal }) {
    await deliverHttp(receiverUrl, payload, { key, signal, timeoutMs: PATIENCE_MS });
  },
});

const shop = defineWorkflow({
  name: 'outbox-shop',
  version: 1,
  input: z.object({ note: z.string() }),
  steps: { write: step('write.v1'), notify: step('notify.v1') },
  async run({ input, steps }) {
    await steps.write.tx(async () => 'written');
    return steps.notify.enqueue(record, { note: input.note });
  },
});

const jobsWithKey = async (key: string) =>
  (await db().sql`select count(*)::int as n from graphile_worker.jobs where key = ${key}`)[0]!.n as number;
const receivedFor = async (key: string) =>
  (await db().sql`select count(*)::int as n from received where message_key = ${key}`)[0]!.n as number;

beforeAll(async () => {
  await db().sql`create table received (message_key text not null, note text not null)`;
  receiver = createServer((req, res) => {
    const key = String(req.headers['idempotency-key']);
    receiverHits.set(key, (receiverHits.get(key) ?? 0) + 1);
    req.resume();
    req.on('end', () => {
      res.writeHead(receiverStatus, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});
afterAll(() => new Promise<void>((resolve) => receiver.close(() => resolve())));

describe('enqueue', () => {
  it('adds one job keyed by the step key, and a replay adds none', async () => {
    const engine = testEngine(db(), [shop]);
    const ref = { scope: 'acme', key: uniqueKey('enq') };
    const result = await engine.run(shop, ref, { note: 'hello' });
    const key = childKey(await storedRoot(db(), ref), 'notify.v1');
    expect(result).toEqual({ key });
    expect(await jobsWithKey(key)).toBe(1);
    await engine.run(shop, ref, { note: 'hello' });
    expect(await jobsWithKey(key)).toBe(1);
    await engine.shutdown();
  });

  it('commits an enqueue step in the transaction of the tx step before it: one commit for both and the job', async () => {
    const engine = testEngine(db(), [shop]);
    const ref = { scope: 'acme', key: uniqueKey('enq-join') };
    await engine.run(shop, ref, { note: 'joined' });
    const root = await storedRoot(db(), ref);
    const [write, notify] = await Promise.all(
      ['write.v1', 'notify.v1'].map(
        async (name) =>
          (await db().sql`select xmin::text from stepkey.steps where scope = ${ref.scope} and key = ${childKey(root, name)}`)[0]!
            .xmin as string,
      ),
    );
    const [job] = await db().sql`select xmin::text from graphile_worker._private_jobs where key = ${childKey(root, 'notify.v1')}`;
    expect(notify).toBe(write);
    // On Citus the job (on the coordinator) and the steps (on the scope's worker) are one
    // distributed transaction, but transaction ids are each node's own: compared on one node only.
    const [citus] = await db().sql<{ on: boolean }[]>`select exists (select 1 from pg_extension where extname = 'citus') as on`;
    if (!citus!.on) expect(job!.xmin).toBe(write);
    else expect(job).toBeDefined();
    await engine.shutdown();
  });

  it('refuses a payload that fails its schema: the step is not completed, nothing is enqueued', async () => {
    const bad = defineWorkflow({
      name: 'outbox-bad',
      version: 1,
      input: z.object({}),
      steps: { notify: step('notify.v1') },
      async run({ steps }) {
        return steps.notify.enqueue(record, { note: 42 as unknown as string });
      },
    });
    const engine = testEngine(db(), [bad]);
    const ref = { scope: 'acme', key: uniqueKey('bad') };
    const error = await engine.run(bad, ref, {}).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/payload of effect 'test.record' is invalid: note: Invalid input/);
    expect(await jobsWithKey(childKey(await storedRoot(db(), ref), 'notify.v1'))).toBe(0);
    expect((await engine.get(ref))!.steps).toEqual([]);
    await engine.shutdown();
  });

  it('leaves no job when the step transaction rolls back (the run was cancelled under it)', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let waiting!: () => void;
    const inWait = new Promise<void>((resolve) => (waiting = resolve));
    const gated = defineWorkflow({
      name: 'outbox-gated',
      version: 1,
      input: z.object({}),
      steps: { wait: step('wait.v1'), notify: step('notify.v1') },
      async run({ steps }) {
        await steps.wait.call(async () => {
          waiting();
          await gate;
        });
        return steps.notify.enqueue(record, { note: 'late' });
      },
    });
    const runner = testEngine(db(), [gated]);
    const other = testEngine(db(), [gated]);
    const ref = { scope: 'acme', key: uniqueKey('rollback') };
    const handle = await runner.start(gated, ref, {});
    // Cancelled by another process while the run is in its first step.
    await inWait;
    expect(await other.cancel(ref)).toBe(true);
    release();
    await expect(handle.result()).rejects.toMatchObject({ code: 'run_cancelled' });
    expect(await jobsWithKey(childKey(handle.rootKey!, 'notify.v1'))).toBe(0);
    await runner.shutdown();
    await other.shutdown();
  });

  it('enqueues outside a workflow inside the caller’s transaction, once per scope and key', async () => {
    const ref = { scope: 'acme', key: uniqueKey('app') };
    let rolledBack = '';
    await expect(
      inTransaction(db().sql, async (tx) => {
        rolledBack = (await enqueueEffect(tx, record, { note: 'x' }, ref)).key;
        throw new Error('the application changed its mind');
      }),
    ).rejects.toThrow(/changed its mind/);
    expect(await jobsWithKey(rolledBack)).toBe(0);
    expect(await db().sql`select 1 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`).toHaveLength(0);

    const first = await inTransaction(db().sql, (tx) => enqueueEffect(tx, record, { note: 'x' }, ref));
    const key = childKey(await storedRoot(db(), ref), 'test.record');
    expect(first).toEqual({ key, enqueued: true });
    expect(await enqueueEffect(db().sql, record, { note: 'x' }, ref)).toEqual({ key, enqueued: false });
    await expect(enqueueEffect(db().sql, record, { note: 'y' }, ref)).rejects.toMatchObject({ code: 'mismatch' });
    expect(await jobsWithKey(key)).toBe(1);
    const other = { scope: 'globex', key: ref.key };
    expect((await enqueueEffect(db().sql, record, { note: 'x' }, other)).key).not.toBe(key);
  });
});

describe('consume', () => {
  let worker: Worker;
  beforeAll(async () => {
    worker = await runWorker({ database: db(), effects: [record, webhook], concurrency: 4, leaseMs: 2_000, onError: () => {} });
  });
  afterAll(() => worker.stop());

  it('applies a delivered effect once, even when the job is delivered twice', async () => {
    const ref = { scope: 'acme', key: uniqueKey('twice') };
    const { key } = await enqueueEffect(db().sql, record, { note: 'dup' }, ref);
    // A second job carrying the same message, as a redelivery would.
    const envelope = JSON.stringify({ k: key, s: ref.scope, p: { note: 'dup' } });
    await db().sql`select graphile_worker.add_job('test.record', ${envelope}::json)`;
    await expect.poll(() => receivedFor(key)).toBe(1);
    await expect.poll(() => jobsWithKey(key)).toBe(0);
    await expect
      .poll(
        async () => (await db().sql`select count(*)::int as n from graphile_worker.jobs where task_identifier = 'test.record'`)[0]!.n,
      )
      .toBe(0);
    expect(await receivedFor(key)).toBe(1);
  });

  it('delivers over HTTP with the message key as Idempotency-Key; a 4xx fails for good and can be retried by hand', async () => {
    receiverStatus = 400;
    const ref = { scope: 'acme', key: uniqueKey('hook') };
    const { key } = await enqueueEffect(db().sql, webhook, { event: 'order.paid' }, ref);
    await expect
      .poll(async () => (await listJobs(db().sql, { status: 'failed' })).find((job) => job.key === key))
      .toMatchObject({ attempts: 1, maxAttempts: 1, lastError: expect.stringMatching(/answered 400/) });
    expect(receiverHits.get(key)).toBe(1);

    receiverStatus = 200;
    const failed = (await listJobs(db().sql, { status: 'failed' })).find((job) => job.key === key)!;
    expect(await retryJobs(db().sql, [failed.id])).toEqual([failed.id]);
    await expect.poll(() => jobsWithKey(key)).toBe(0);
    expect(receiverHits.get(key)).toBe(2);
  });

  it('retries a 5xx with backoff', async () => {
    receiverStatus = 503;
    const ref = { scope: 'acme', key: uniqueKey('retry') };
    const { key } = await enqueueEffect(db().sql, webhook, { event: 'order.paid' }, ref);
    await expect.poll(() => receiverHits.get(key) ?? 0).toBe(1);
    await expect
      .poll(async () => (await listJobs(db().sql)).find((j) => j.key === key))
      .toMatchObject({ status: 'retrying', attempts: 1, maxAttempts: 3 });
    receiverStatus = 200;
    await db().sql`update graphile_worker._private_jobs set run_at = now() where key = ${key}`;
    await expect.poll(() => jobsWithKey(key)).toBe(0);
    expect(receiverHits.get(key)).toBe(2);
  });
});
