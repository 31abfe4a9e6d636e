/**
 * `exclude` on stepkey/http's routes and tRPC's procedures: a declared
 * volatile JSON field is left out of the fingerprint (a retry that changes
 * only it replays; any other change is 422), on a handler and a workflow
 * route, on both adapters; a bad path is refused where the route or the
 * procedure is defined (definition_error), never per request, and never
 * taken as excluding nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Engine } from '../../src/engine/engine.js';
import { createFetchIdempotency } from '../../src/http/fetch.js';
import { createNodeIdempotency } from '../../src/http/node.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { silentLogger } from '../../src/log/logger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { serveAdapters, type AdapterServers } from '../helpers/adapter-servers.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const handled = new Map<string, number>();

const recordPayment = defineWorkflow({
  name: 'http-exclude-pay',
  version: 1,
  input: z.object({ amount: z.number(), meta: z.object({ sentAt: z.string() }) }),
  steps: { record: step('http-exclude-record.v1', { output: z.object({ id: z.number() }) }) },
  async run({ input, steps }) {
    return steps.record.tx(async (_db, { sql }) => {
      const [row] = await sql`insert into http_exclude_payments (amount) values (${input.amount}) returning id`;
      return { id: Number(row!.id) };
    });
  },
});

let engine: Engine;
let servers: AdapterServers;
const exclude = ['meta.sentAt'];

beforeAll(async () => {
  await db().sql`create table http_exclude_payments (id bigserial primary key, amount int not null)`;
  engine = testEngine(db(), [recordPayment]);
  const ledger = new Ledger({ sql: db().sql });
  const setup = { ledger, engine, logger: silentLogger };
  const handler = (key: string) => {
    handled.set(key, (handled.get(key) ?? 0) + 1);
    return { status: 201, body: { calls: handled.get(key) } };
  };

  const node = createNodeIdempotency({ ...setup, scope: () => 'acme' });
  const fetchStyle = createFetchIdempotency({ ...setup, scope: () => 'acme' });
  servers = await serveAdapters(
    {
      '/calls': node.handler({ route: 'calls', exclude }, (_req, call) => handler(call.idempotency.key)),
      '/payments': node.workflow(recordPayment, { route: 'payments', exclude }),
    },
    {
      '/calls': fetchStyle.handler({ route: 'calls', exclude }, (_request, call) => handler(call.idempotency.key)),
      '/payments': fetchStyle.workflow(recordPayment, { route: 'payments', exclude }),
    },
  );
});
afterAll(async () => {
  servers.close();
  await engine.shutdown();
});

const payments = async (amount: number) => (await db().sql`select count(*)::int as n from http_exclude_payments where amount = ${amount}`)[0]!.n as number;

describe.each(['node', 'fetch'] as const)('exclude on a route (%s)', (adapter) => {
  const send = (path: string, key: string, body: unknown) =>
    fetch(`${servers.bases[adapter]}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: JSON.stringify(body) }).then(
      async (response) => ({ status: response.status, replayed: response.headers.get('idempotent-replayed'), body: await response.text() }),
    );

  it.each(['/calls', '/payments'])('%s: a retry that changes only an excluded field replays; another change is 422', async (path) => {
    const key = uniqueKey(`exclude-${adapter}`);
    const amount = Math.floor(Math.random() * 1e9);
    const first = await send(path, key, { amount, meta: { sentAt: '10:00' } });
    expect(first.status, first.body).toBe(path === '/calls' ? 201 : 200);
    const retry = await send(path, key, { amount, meta: { sentAt: '10:05' } });
    expect(retry).toEqual({ ...first, replayed: 'true' });
    const changed = await send(path, key, { amount: amount + 1, meta: { sentAt: '10:05' } });
    expect(changed.status).toBe(422);
    if (path === '/calls') expect(handled.get(key)).toBe(1);
    else expect(await payments(amount)).toBe(1);
  });
});

describe('a bad exclude', () => {
  const ledger = () => new Ledger({ sql: db().sql });
  const bad = [[''], 'meta.sentAt' as unknown as string[], [42 as unknown as string]];

  it('is refused where a stepkey/http route is defined, on either adapter, handler or workflow', () => {
    const node = createNodeIdempotency({ ledger: ledger(), engine, scope: () => 'acme', logger: silentLogger });
    const fetchStyle = createFetchIdempotency({ ledger: ledger(), engine, scope: () => 'acme', logger: silentLogger });
    for (const paths of bad) {
      const definitions = [
        () => node.handler({ route: 'calls', exclude: paths }, () => ({ status: 200 })),
        () => node.workflow(recordPayment, { exclude: paths }),
        () => fetchStyle.handler({ route: 'calls', exclude: paths }, () => ({ status: 200 })),
        () => fetchStyle.workflow(recordPayment, { exclude: paths }),
      ];
      for (const define of definitions) {
        expect(define).toThrow(expect.objectContaining({ code: 'definition_error', message: expect.stringMatching(/^stepkey\/http .*(excluded path|exclude must be)/) }));
      }
    }
  });

  it('is refused where a tRPC procedure is defined', () => {
    const idempotency = createIdempotency({ ledger: ledger(), engine, scope: () => 'acme', logger: false });
    for (const paths of bad) {
      expect(() => idempotency.procedure({ exclude: paths })).toThrow(expect.objectContaining({ code: 'definition_error', message: expect.stringMatching(/^idempotency\.procedure\(\): /) }));
      expect(() => idempotency.workflow(recordPayment, { exclude: paths })).toThrow(
        expect.objectContaining({ code: 'definition_error', message: expect.stringMatching(/^idempotency\.workflow\(http-exclude-pay\): /) }),
      );
    }
  });
});
