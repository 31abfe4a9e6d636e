/**
 * How an app wires the idempotency middleware: a context without tRPC's
 * request info, a middleware placed before `.input()`, and what the resolver
 * is typed to find in ctx.idempotency.
 */
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import type {
  BypassedIdempotency,
  IdempotencyContext,
  IdempotencyContextFor,
  ProcedureIdempotencyOptions,
} from '../../src/trpc/idempotency.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { buildApp, counters, listen, placeOrder } from '../helpers/trpc-app.js';

const db = useTestDatabase({ max: 20 });
let engine: Engine;
let app: ReturnType<typeof buildApp>;
let url = '';

const keyed = (key: string) => ({ authorization: 'Bearer tenant-a', 'idempotency-key': `"${key}"` });
const ledgerRows = async () => (await db().sql`select count(*)::int as n from stepkey.ledger`)[0]!.n as number;
const orders = async (sku: string) => (await db().sql`select count(*)::int as n from trpc_orders where sku = ${sku}`)[0]!.n as number;

beforeAll(async () => {
  await db().sql`create table trpc_orders (id bigserial primary key, tenant text not null, sku text not null, quantity int not null)`;
  engine = testEngine(db(), [placeOrder]);
  // The context has no `info`: batches are told apart by the request URL.
  app = buildApp(new Ledger({ sql: db().sql }), engine, { info: false });
  url = await listen(app.server);
});
afterAll(async () => {
  app.server.close();
  await engine.shutdown();
});

describe('a context without tRPC request info', () => {
  it('still refuses a key on a batch of several operations, and runs none of them', async () => {
    const response = await fetch(`${url}/orders.create,orders.refund?batch=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyed(uniqueKey('batch-no-info')) },
      body: JSON.stringify({ 0: { sku: 'batch-no-info', quantity: 1 }, 1: { sku: 'batch-no-info', quantity: 1 } }),
    });
    const body = (await response.json()) as { error: { data: { httpStatus: number }; message: string } }[];
    expect(body.map((item) => item.error.data.httpStatus)).toEqual([400, 400]);
    expect(body[0]!.error.message).toMatch(/one Idempotency-Key for 2 operations/);
    expect(await orders('batch-no-info')).toBe(0);
  });

  it('accepts a key on a batch of one', async () => {
    const response = await fetch(`${url}/orders.create?batch=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyed(uniqueKey('batch-of-one')) },
      body: JSON.stringify({ 0: { sku: 'batch-of-one', quantity: 1 } }),
    });
    expect(response.status).toBe(200);
    expect(await orders('batch-of-one')).toBe(1);
  });
});

describe('a middleware placed before .input()', () => {
  it.each([
    ['idempotency.procedure()', 'orders.early', { sku: 'early', quantity: 1 }],
    ['idempotency.workflow()', 'orders.earlyPlace', { sku: 'early', quantity: 1 }],
  ])('%s refuses every keyed call with a 500 that says where to put it, and claims nothing', async (_what, path, input) => {
    const before = { rows: await ledgerRows(), early: counters.early, place: counters.place };
    const key = uniqueKey('early');
    const first = await post(url, path, input, keyed(key));
    const changed = await post(url, path, { ...input, quantity: 2 }, keyed(key));
    for (const answer of [first, changed]) {
      expect(answer.status).toBe(500);
      expect(answer.body).toMatch(/misconfigured/);
      expect(answer.body).toMatch(/after \.input\(schema\)/);
    }
    expect(counters.early).toBe(before.early);
    expect(counters.place).toBe(before.place);
    expect(await ledgerRows()).toBe(before.rows);
    expect(await orders('early')).toBe(0);
  });
});

describe('ctx.idempotency', () => {
  it('is typed by the options: bypassed only when failing open, undefined only when optional', () => {
    expectTypeOf<IdempotencyContextFor<{}>>().toEqualTypeOf<IdempotencyContext>();
    expectTypeOf<IdempotencyContextFor<{ onLedgerDown: 'open' }>>().toEqualTypeOf<IdempotencyContext | BypassedIdempotency>();
    expectTypeOf<IdempotencyContextFor<{ mode: 'optional' }>>().toEqualTypeOf<IdempotencyContext | undefined>();
    expectTypeOf<IdempotencyContextFor<ProcedureIdempotencyOptions>>().toEqualTypeOf<
      IdempotencyContext | BypassedIdempotency | undefined
    >();
    expectTypeOf<BypassedIdempotency>().not.toHaveProperty('sql');
    expectTypeOf<BypassedIdempotency>().not.toHaveProperty('db');
  });
});
