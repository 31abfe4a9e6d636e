/**
 * stepkey/http's workflow routes, on both adapters (a Node handler on
 * node:http, a fetch handler on @hono/node-server without Hono): the run
 * under the caller's key and its result, replayed from the run's stored
 * output byte for byte; a stored deterministic error; 409 while it runs;
 * 202 while it waits, the same on a repeat, the result once it completes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createFetchIdempotency } from '../../src/http/fetch.js';
import { createNodeIdempotency } from '../../src/http/node.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { silentLogger } from '../../src/log/logger.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { send } from '../helpers/conformance-servers.js';
import { serveAdapters, type AdapterServers } from '../helpers/adapter-servers.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const gates = new Map<string, () => void>();
const held = new Map<string, Promise<void>>();
const hold = (name: string) => held.set(name, new Promise<void>((resolve) => gates.set(name, resolve)));
const reached = new Set<string>();

const placeOrder = defineWorkflow({
  name: 'http-place-order',
  version: 1,
  input: z.object({ sku: z.string(), quantity: z.number().int().positive(), gate: z.string().optional() }),
  steps: { record: step('http-record.v1', { output: z.object({ orderId: z.number() }) }) },
  async run({ input, steps, ctx }) {
    return steps.record.tx(async (_db, { sql }) => {
      if (input.gate) {
        reached.add(input.gate);
        await held.get(input.gate);
      }
      if (input.sku === 'sold-out') throw new NonRetryableError(`${input.sku} is sold out`, { code: 'OUT_OF_STOCK' });
      const [row] = await sql`insert into http_wf_orders (tenant, sku) values (${ctx.scope}, ${input.sku}) returning id`;
      return { orderId: Number(row!.id) };
    });
  },
});

const approval = defineWorkflow({
  name: 'http-approval',
  version: 1,
  input: z.object({ doc: z.string() }),
  events: { approved: z.object({ by: z.string() }) },
  steps: { approval: step('http-approval.v1') },
  async run({ input, steps }) {
    const got = await steps.approval.waitForEvent('approved');
    return { doc: input.doc, approvedBy: got.payload.by };
  },
});

const tenantOf = (authorization: string | null | undefined) => /^Bearer (\S+)$/.exec(authorization ?? '')?.[1] ?? null;
const respond = ({ output, key }: { output: { orderId: number }; key: string }) => ({ status: 201, headers: { location: `/orders/${output.orderId}` }, body: { ...output, key } });

let engine: Engine;
let servers: AdapterServers;

beforeAll(async () => {
  await db().sql`create table http_wf_orders (id bigserial primary key, tenant text not null, sku text not null)`;
  engine = testEngine(db(), [placeOrder, approval]);
  const ledger = new Ledger({ sql: db().sql });

  const node = createNodeIdempotency({ ledger, engine, scope: (req) => tenantOf(req.headers.authorization), logger: silentLogger });
  const fetchStyle = createFetchIdempotency({ ledger, engine, scope: (request) => tenantOf(request.headers.get('authorization')), logger: silentLogger });
  servers = await serveAdapters(
    { '/orders': node.workflow(placeOrder, { route: 'orders.place', respond }), '/approvals': node.workflow(approval) },
    { '/orders': fetchStyle.workflow(placeOrder, { route: 'orders.place', respond }), '/approvals': fetchStyle.workflow(approval) },
  );
});
afterAll(async () => {
  servers.close();
  await engine.shutdown();
});

const keyed = (key: string) => ({ authorization: 'Bearer acme', 'idempotency-key': key });
const orders = async (sku: string) => (await db().sql`select count(*)::int as n from http_wf_orders where sku = ${sku}`)[0]!.n as number;

describe.each(['node', 'fetch'] as const)('a workflow route (%s)', (adapter) => {
  const url = (path: string) => `${servers.bases[adapter]}${path}`;
  const sku = (what: string) => `${adapter}-${what}`;

  it('runs the workflow once under the key and renders every replay from its stored output, byte for byte', async () => {
    const key = uniqueKey(adapter);
    const first = await send(url('/orders'), JSON.stringify({ sku: sku('one'), quantity: 1 }), keyed(key));
    const again = await send(url('/orders'), JSON.stringify({ quantity: 1, sku: sku('one') }), keyed(key));
    expect(first.status).toBe(201);
    expect(first.headers.get('location')).toMatch(/^\/orders\/\d+$/);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(JSON.parse(first.body)).toMatchObject({ key });
    expect(again.status).toBe(201);
    expect(again.body).toBe(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await orders(sku('one'))).toBe(1);
    expect(await db().sql`select kind from stepkey.ledger where scope = 'acme' and key = ${key}`).toEqual([{ kind: 'run' }]);
    const changed = await send(url('/orders'), JSON.stringify({ sku: sku('one'), quantity: 2 }), keyed(key));
    expect(changed.status).toBe(422);
    expect(changed.body).toMatch(/already used for workflow http-place-order with different input/);
  });

  it('answers a stored deterministic error as a problem with its code, and replays it marked', async () => {
    const key = uniqueKey(adapter);
    const first = await send(url('/orders'), JSON.stringify({ sku: 'sold-out', quantity: 1 }), keyed(key));
    const again = await send(url('/orders'), JSON.stringify({ sku: 'sold-out', quantity: 1 }), keyed(key));
    expect(first.status).toBe(400);
    expect(first.headers.get('content-type')).toBe('application/problem+json');
    expect(JSON.parse(first.body)).toEqual({ title: 'Bad Request', status: 400, detail: 'sold-out is sold out', code: 'OUT_OF_STOCK' });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(again.body).toBe(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });

  it('answers 409 with Retry-After while the run works', async () => {
    const key = uniqueKey(adapter);
    hold(key);
    const first = send(url('/orders'), JSON.stringify({ sku: sku('busy'), quantity: 1, gate: key }), keyed(key));
    // The run's first step holds at its gate, its claim not yet committed: the duplicate is answered without waiting for it.
    await expect.poll(() => reached.has(key)).toBe(true);
    const busy = await send(url('/orders'), JSON.stringify({ sku: sku('busy'), quantity: 1, gate: key }), keyed(key));
    expect(busy.status).toBe(409);
    expect(Number(busy.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    gates.get(key)!();
    expect((await first).status).toBe(201);
    expect(await orders(sku('busy'))).toBe(1);
  });

  it('answers 202 while the run waits, the same on a repeat, and the result once it completes', async () => {
    const key = uniqueKey(adapter);
    const body = JSON.stringify({ doc: 'contract' });
    const first = await send(url('/approvals'), body, keyed(key));
    expect(first.status).toBe(202);
    expect(JSON.parse(first.body)).toEqual({ key, status: 'waiting', waitingFor: 'event', step: 'http-approval.v1', topic: 'approved' });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const repeat = await send(url('/approvals'), body, keyed(key));
    expect(repeat.status).toBe(202);
    expect(repeat.body).toBe(first.body);
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    await engine.send({ scope: 'acme', key }, 'approved', { by: 'ada' }, { key: `approval-${key}` });
    await expect.poll(async () => (await engine.get({ scope: 'acme', key }))?.status).toBe('completed');
    const done = await send(url('/approvals'), body, keyed(key));
    expect(done.status).toBe(200);
    expect(JSON.parse(done.body)).toEqual({ doc: 'contract', approvedBy: 'ada' });
    expect(done.headers.get('idempotent-replayed')).toBe('true');
  });

  it('refuses before anything is claimed: no key 400, anonymous 401, a body that is not JSON 415, invalid input 400', async () => {
    const key = uniqueKey(adapter);
    const answers = [
      await send(url('/orders'), JSON.stringify({ sku: sku('refused'), quantity: 1 }), { authorization: 'Bearer acme' }),
      await send(url('/orders'), JSON.stringify({ sku: sku('refused'), quantity: 1 }), { 'idempotency-key': key }),
      await send(url('/orders'), 'sku=x', { ...keyed(key), 'content-type': 'application/x-www-form-urlencoded' }),
      await send(url('/orders'), JSON.stringify({ sku: sku('refused'), quantity: -1 }), keyed(key)),
    ];
    expect(answers.map((answer) => answer.status)).toEqual([400, 401, 415, 400]);
    expect(answers[3]!.body).toMatch(/input of workflow 'http-place-order' is invalid/);
    for (const answer of answers) expect(answer.headers.get('content-type')).toBe('application/problem+json');
    expect(await engine.get({ scope: 'acme', key })).toBeUndefined();
    expect(await orders(sku('refused'))).toBe(0);
  });
});
