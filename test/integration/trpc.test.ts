import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTRPCClient, httpBatchLink, httpLink, splitLink } from '@trpc/client';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { createServer } from 'node:http';
import postgres from 'postgres';
import { Clock } from '../../src/db/clock.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { idempotencyHeaders, idempotencyLink } from '../../src/trpc/link.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { post, rawPost } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { buildApp, counters, gate, listen, serveApp, type AppRouter, type ServedApp } from '../helpers/trpc-app.js';

const db = useTestDatabase({ max: 60 });
let url = '';
let app: ReturnType<typeof buildApp>;
let engine: Engine;

const auth = (tenant: string) => ({ authorization: `Bearer ${tenant}` });
const keyed = (key: string, tenant = 'tenant-a') => ({ ...auth(tenant), 'idempotency-key': `"${key}"` });
const ledgerRows = async () => (await db().sql`select count(*)::int as n from stepkey.ledger`)[0]!.n as number;
const orders = async (sku: string) => (await db().sql`select count(*)::int as n from trpc_orders where sku = ${sku}`)[0]!.n as number;

let served: ServedApp;
beforeAll(async () => {
  ({ url, app, engine } = served = await serveApp(db()));
});
afterAll(() => served.close());

describe('the Idempotency-Key header', () => {
  it('answers 400 naming the header when the key is missing, and stores nothing', async () => {
    const before = await ledgerRows();
    const answer = await post(url, 'orders.create', { sku: 'nokey', quantity: 1 }, auth('tenant-a'));
    expect(answer.status).toBe(400);
    expect(answer.body).toMatch(/Idempotency-Key header/);
    expect(await ledgerRows()).toBe(before);
    expect(await orders('nokey')).toBe(0);
  });

  it.each([
    ['an unterminated quoted key', ['Idempotency-Key: "abc']],
    ['two header lines', ['Idempotency-Key: "a"', 'Idempotency-Key: "b"']],
    ['a list of keys', ['Idempotency-Key: "a", "b"']],
    ['a key over 255 characters', [`Idempotency-Key: "${'k'.repeat(256)}"`]],
    ['an empty key', ['Idempotency-Key: ""']],
  ])('answers 400 to %s, and runs nothing', async (_what, lines) => {
    const before = counters.create;
    const answer = await rawPost(url, 'orders.create', { sku: 'bad-key', quantity: 1 }, ['Authorization: Bearer tenant-a', ...lines]);
    expect(answer.status).toBe(400);
    expect(counters.create).toBe(before);
    expect(await orders('bad-key')).toBe(0);
  });

  it('accepts a bare token as well as a quoted string', async () => {
    const key = uniqueKey('bare');
    const quoted = await post(url, 'orders.create', { sku: 'bare', quantity: 1 }, keyed(key));
    const bare = await post(url, 'orders.create', { sku: 'bare', quantity: 1 }, { ...auth('tenant-a'), 'idempotency-key': key });
    expect(quoted.status).toBe(200);
    expect(bare.headers.get('idempotent-replayed')).toBe('true');
    expect(bare.body).toBe(quoted.body);
  });

  it('refuses an anonymous caller before claiming anything', async () => {
    const before = await ledgerRows();
    const answer = await post(url, 'orders.create', { sku: 'anon', quantity: 1 }, { 'idempotency-key': '"anon-1"' });
    expect(answer.status).toBe(401);
    expect(await ledgerRows()).toBe(before);
  });

  it('validates the input before the claim: a schema error stores nothing', async () => {
    const before = await ledgerRows();
    const answer = await post(url, 'orders.create', { sku: 'x', quantity: -1 }, keyed(uniqueKey()));
    expect(answer.status).toBe(400);
    expect(await ledgerRows()).toBe(before);
  });

  it('runs an optional procedure without a key, and keyed with one', async () => {
    const plain = await post(url, 'orders.note', { text: 'hi' }, auth('tenant-a'));
    expect((plain.json as { result: { data: unknown } }).result.data).toEqual({ text: 'hi', keyed: false });
    const keyedAnswer = await post(url, 'orders.note', { text: 'hi' }, keyed(uniqueKey()));
    expect((keyedAnswer.json as { result: { data: unknown } }).result.data).toEqual({ text: 'hi', keyed: true });
  });
});

describe('claim and replay', () => {
  it('replays the stored result byte for byte with Idempotent-Replayed, without running the resolver', async () => {
    const key = uniqueKey('replay');
    const before = counters.create;
    const first = await post(url, 'orders.create', { sku: 'replay', quantity: 2 }, keyed(key));
    const second = await post(url, 'orders.create', { quantity: 2, sku: 'replay' }, keyed(key));
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toBe(first.body);
    expect(first.body).toMatch(/"zeta":1,"alpha":\[3,1,2\]/);
    expect(counters.create - before).toBe(1);
    expect(await orders('replay')).toBe(1);
  });

  it('answers a concurrent duplicate 409 with Retry-After while the first still works, and stores nothing for it', async () => {
    const key = uniqueKey('busy');
    const held = gate(key);
    const entered = counters.create;
    const first = post(url, 'orders.create', { sku: 'busy', quantity: 1, gate: key }, keyed(key));
    // The first call is inside its resolver, parked on its gate: the duplicate can only be answered without waiting for it.
    await expect.poll(() => counters.create).toBe(entered + 1);
    expect(await orders('busy')).toBe(0);
    const duplicate = await post(url, 'orders.create', { sku: 'busy', quantity: 1, gate: key }, keyed(key));
    expect(duplicate.status).toBe(409);
    expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    held.open();
    expect((await first).status).toBe(200);
    expect(await orders('busy')).toBe(1);
  });

  it('answers 422 to the same key with another input or on another procedure, and changes nothing', async () => {
    const key = uniqueKey('mismatch');
    const first = await post(url, 'orders.create', { sku: 'mm', quantity: 1 }, keyed(key));
    const [row] = await db().sql`select * from stepkey.ledger where scope = 'tenant-a' and key = ${key}`;
    const changed = await post(url, 'orders.create', { sku: 'mm', quantity: 2 }, keyed(key));
    const otherProcedure = await post(url, 'orders.refund', { sku: 'mm', quantity: 1 }, keyed(key));
    expect(changed.status).toBe(422);
    expect(otherProcedure.status).toBe(422);
    expect(changed.body).toMatch(/already used for procedure orders\.create with different input/);
    expect(otherProcedure.body).toMatch(/already used for another operation, procedure orders\.create; .* new key for orders\.refund/);
    expect(otherProcedure.body).not.toMatch(/different input/);
    const workflowProcedure = await post(url, 'orders.place', { sku: 'mm', quantity: 1 }, keyed(key));
    expect(workflowProcedure.status).toBe(422);
    expect(workflowProcedure.body).toMatch(/already used for another operation, procedure orders\.create; .* new key for trpc-place-order/);
    expect((await db().sql`select * from stepkey.ledger where scope = 'tenant-a' and key = ${key}`)[0]).toEqual(row);
    expect((await post(url, 'orders.create', { sku: 'mm', quantity: 1 }, keyed(key))).body).toBe(first.body);
  });

  it('stores a deterministic client error and replays it; the resolver runs once and its writes roll back', async () => {
    const key = uniqueKey('client-error');
    const before = counters.create;
    const first = await post(url, 'orders.create', { sku: 'missing', quantity: 1, fail: 'client' }, keyed(key));
    const second = await post(url, 'orders.create', { sku: 'missing', quantity: 1, fail: 'client' }, keyed(key));
    expect(first.status).toBe(404);
    expect(second.status).toBe(404);
    expect(second.body).toBe(first.body);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(counters.create - before).toBe(1);
    expect(await orders('missing')).toBe(0);
  });

  it('stores an error marked non-retryable as a client error, never a 500', async () => {
    const key = uniqueKey('declined');
    const first = await post(url, 'orders.create', { sku: 'declined', quantity: 1, fail: 'permanent' }, keyed(key));
    const second = await post(url, 'orders.create', { sku: 'declined', quantity: 1, fail: 'permanent' }, keyed(key));
    expect(first.status).toBe(412);
    expect(first.body).toMatch(/card declined/);
    expect(second.body).toBe(first.body);
  });

  it.each([
    ['an unexpected error (500)', 'crash', 500],
    ['a transient 409 from the resolver', 'conflict', 409],
  ])('releases the key after %s so the retry runs', async (_what, fail, status) => {
    const key = uniqueKey(fail);
    const sku = `release-${fail}`;
    const before = counters.create;
    const first = await post(url, 'orders.create', { sku, quantity: 1, fail }, keyed(key));
    expect(first.status).toBe(status);
    const second = await post(url, 'orders.create', { sku, quantity: 1, fail }, keyed(key));
    expect(second.status).toBe(status);
    expect(counters.create - before).toBe(2);
    expect(await orders(sku)).toBe(0);
    expect(await db().sql`select 1 from stepkey.ledger where scope = 'tenant-a' and key = ${key}`).toHaveLength(0);
  });

  it('stores a resolver that returns nothing and replays it as nothing, byte for byte', async () => {
    const key = uniqueKey('forget');
    const before = counters.forget;
    const first = await post(url, 'orders.forget', { sku: 'forget' }, keyed(key));
    const second = await post(url, 'orders.forget', { sku: 'forget' }, keyed(key));
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toBe(first.body);
    expect((first.json as { result: object }).result).not.toHaveProperty('data');
    expect(counters.forget - before).toBe(1);
    expect(await orders('forget')).toBe(1);
  });

  it('runs 50 concurrent identical requests once; no 5xx, the losers answered while the winner still works', async () => {
    const key = uniqueKey('fifty');
    const held = gate(key);
    const before = counters.create;
    let answered = 0;
    const answers = Array.from({ length: 50 }, () =>
      post(url, 'orders.create', { sku: 'fifty', quantity: 1, gate: key }, keyed(key)).then((answer) => {
        answered += 1;
        return answer;
      }),
    );
    // The winner is parked on its gate; all 49 others must come back before it is let go.
    await expect.poll(() => answered).toBe(49);
    held.open();
    const all = await Promise.all(answers);
    expect(counters.create - before).toBe(1);
    expect(await orders('fifty')).toBe(1);
    expect(all.filter((a) => a.status >= 500)).toEqual([]);
    expect(all.filter((a) => a.status === 200)).toHaveLength(1);
    expect(all.filter((a) => a.status === 409)).toHaveLength(49);
  });

  it('keeps tenants apart: the same key from A and B runs twice and answers each its own', async () => {
    const key = uniqueKey('tenants');
    const a = await post(url, 'orders.create', { sku: 'tenant-pair', quantity: 1 }, keyed(key, 'tenant-a'));
    const b = await post(url, 'orders.create', { sku: 'tenant-pair', quantity: 1 }, keyed(key, 'tenant-b'));
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(a.body).not.toBe(b.body);
    expect(await orders('tenant-pair')).toBe(2);
  });

  it('refuses a key on a batch of several operations', async () => {
    const response = await fetch(`${url}/orders.create,orders.refund?batch=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyed(uniqueKey('batch')) },
      body: JSON.stringify({ 0: { sku: 'batch', quantity: 1 }, 1: { sku: 'batch', quantity: 1 } }),
    });
    const body = (await response.json()) as { error: { data: { httpStatus: number }; message: string } }[];
    expect(body.map((item) => item.error.data.httpStatus)).toEqual([400, 400]);
    expect(body[0]!.error.message).toMatch(/one Idempotency-Key for 2 operations/);
    expect(await orders('batch')).toBe(0);
  });
});

describe('ledger unavailable', () => {
  it('answers 503 with Retry-After by default and runs when the procedure fails open', async () => {
    const dead = postgres('postgres://postgres@127.0.0.1:1/none', { max: 1, connect_timeout: 1, onnotice: () => {} });
    const down = buildApp(new Ledger({ sql: dead, clock: new Clock() }), engine);
    const downUrl = await listen(down.server);
    const closed = await post(downUrl, 'orders.refund', { sku: 'down', quantity: 1 }, keyed(uniqueKey('down')));
    expect(closed.status).toBe(503);
    expect(closed.headers.get('retry-after')).toBe('1');
    const open = await post(downUrl, 'orders.bestEffort', { text: 'still works' }, keyed(uniqueKey('open')));
    expect(open.status).toBe(200);
    expect((open.json as { result: { data: unknown } }).result.data).toEqual({ text: 'still works', bypassed: true });
    down.server.close();
    await dead.end({ timeout: 0 });
  });
});

describe('workflow procedures', () => {
  it('run the workflow once, keep one ledger row for request and run, and render replays from its output', async () => {
    const key = uniqueKey('place');
    const before = counters.place;
    const first = await post(url, 'orders.place', { sku: 'wf', quantity: 1 }, keyed(key));
    const second = await post(url, 'orders.place', { sku: 'wf', quantity: 1 }, keyed(key));
    expect((first.json as { result: { data: unknown } }).result.data).toMatchObject({ sku: 'wf', replayed: false });
    expect((second.json as { result: { data: unknown } }).result.data).toMatchObject({ sku: 'wf', replayed: true });
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(counters.place - before).toBe(1);
    const rows = await db().sql`select kind from stepkey.ledger where scope = 'tenant-a' and key = ${key}`;
    expect(rows).toEqual([{ kind: 'run' }]);
    expect((await post(url, 'orders.place', { sku: 'wf', quantity: 2 }, keyed(key))).status).toBe(422);
  });

  it('answers 409 while the run is in progress, and stores and replays a deterministic workflow error', async () => {
    const key = uniqueKey('slow-run');
    const held = gate(key);
    const entered = counters.place;
    const slow = post(url, 'orders.place', { sku: 'slow', quantity: 1, gate: key }, keyed(key));
    // The run's first step is parked on the gate (its start is not even committed yet).
    await expect.poll(() => counters.place).toBe(entered + 1);
    const busy = await post(url, 'orders.place', { sku: 'slow', quantity: 1, gate: key }, keyed(key));
    expect(busy.status).toBe(409);
    held.open();
    expect((await slow).status).toBe(200);

    const soldOut = uniqueKey('sold-out');
    const first = await post(url, 'orders.place', { sku: 'sold-out', quantity: 1 }, keyed(soldOut));
    const second = await post(url, 'orders.place', { sku: 'sold-out', quantity: 1 }, keyed(soldOut));
    expect(first.status).toBe(412);
    expect(second.status).toBe(412);
    expect(second.body).toBe(first.body);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.headers.get('idempotent-replayed')).toBe('true');
  });

  it('marks a stored 4xx replayed on every repeat and never on the answer to the call that ran the run — a run cancelled under it included', async () => {
    const key = uniqueKey('cancelled-under-call');
    const held = gate(key);
    const entered = counters.hold;
    const first = post(url, 'orders.hold', { sku: 'held', gate: key }, keyed(key));
    // The run's start has committed; it holds at its second step.
    await expect.poll(() => counters.hold, { timeout: PATIENCE_MS }).toBe(entered + 1);
    expect(await engine.cancel({ scope: 'tenant-a', key }, 'the operator stopped it')).toBe(true);
    held.open();
    const answer = await first;
    expect(answer.status).toBe(412);
    expect(answer.body).toMatch(/cancelled: the operator stopped it/);
    expect(answer.headers.get('idempotent-replayed')).toBeNull();
    const repeat = await post(url, 'orders.hold', { sku: 'held', gate: key }, keyed(key));
    expect(repeat.status).toBe(412);
    expect(repeat.body).toBe(answer.body);
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
  });

  it('createWorkflowRouter starts a run idempotently and reads its status by key, per caller', async () => {
    const key = uniqueKey('router');
    const start = await post(url, 'workflows.place.start', { sku: 'router', quantity: 3 }, keyed(key));
    expect((start.json as { result: { data: unknown } }).result.data).toMatchObject({ key, started: true });
    const again = await post(url, 'workflows.place.start', { sku: 'router', quantity: 3 }, keyed(key));
    expect((again.json as { result: { data: unknown } }).result.data).toMatchObject({ key, started: false });
    await expect
      .poll(async () => {
        const response = await fetch(`${url}/workflows.place.status?input=${encodeURIComponent(JSON.stringify({ key }))}`, {
          headers: auth('tenant-a'),
        });
        return ((await response.json()) as { result: { data: { status?: string } | null } }).result.data?.status;
      })
      .toBe('completed');
    const other = await fetch(`${url}/workflows.place.status?input=${encodeURIComponent(JSON.stringify({ key }))}`, {
      headers: auth('tenant-b'),
    });
    expect(((await other.json()) as { result: { data: unknown } }).result.data).toBeNull();
  });

  it('createWorkflowRouter builds on the base procedure it is given: its middleware refuses before any claim', async () => {
    const key = uniqueKey('blocked');
    const before = await ledgerRows();
    const start = await post(url, 'workflows.place.start', { sku: 'blocked', quantity: 1 }, keyed(key, 'tenant-blocked'));
    expect(start.status).toBe(403);
    expect(start.body).toMatch(/tenant-blocked may not call this/);
    const status = await fetch(`${url}/workflows.place.status?input=${encodeURIComponent(JSON.stringify({ key }))}`, {
      headers: auth('tenant-blocked'),
    });
    expect(status.status).toBe(403);
    expect(await ledgerRows()).toBe(before);
    expect(await orders('blocked')).toBe(0);
  });

  it('createWorkflowRouter answers 400, not 500, to a status key the engine refuses', async () => {
    const response = await fetch(`${url}/workflows.place.status?input=${encodeURIComponent(JSON.stringify({ key: 'caf\u00e9' }))}`, {
      headers: auth('tenant-a'),
    });
    const body = (await response.json()) as { error: { message: string } };
    expect(response.status).toBe(400);
    expect(body.error.message).toMatch(/outside printable ASCII/);
  });
});

describe('the client link', () => {
  it('mints one key per mutation and retries it after a dropped connection without a second execution', async () => {
    let dropped = 0;
    const handler = createHTTPHandler({ router: app.router, basePath: '/trpc/', createContext: ({ req, res, info }) => ({ req, res, info, tenant: 'tenant-link' }) });
    const flaky = createServer((req, res) => {
      if (dropped === 0 && req.headers['idempotency-key']) {
        dropped += 1;
        res.end = (() => {
          req.socket.destroy();
          return res;
        }) as typeof res.end;
      }
      handler(req, res);
    });
    const flakyUrl = await listen(flaky as never);
    const client = createTRPCClient<AppRouter>({
      links: [
        idempotencyLink({ baseDelayMs: 20 }),
        splitLink({
          condition: (op) => op.type === 'mutation',
          true: httpLink({ url: flakyUrl, headers: ({ op }) => idempotencyHeaders(op) }),
          false: httpBatchLink({ url: flakyUrl }),
        }),
      ],
    });
    const before = counters.create;
    const result = await client.orders.create.mutate({ sku: 'link', quantity: 1 });
    expect(dropped).toBe(1);
    expect(counters.create - before).toBe(1);
    expect(await orders('link')).toBe(1);
    expect(result).toMatchObject({ sku: 'link' });
    const second = await client.orders.create.mutate({ sku: 'link', quantity: 1 });
    expect(second.orderId).not.toBe(result.orderId);
    flaky.close();
  });
});
