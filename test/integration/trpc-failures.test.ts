/**
 * Database failures as tRPC callers see them: 503 + Retry-After while Postgres
 * is unavailable (before or after the claim, in idempotent procedures,
 * workflow procedures and createWorkflowRouter alike), 409 + Retry-After when
 * a run continues elsewhere, 500 for other database failures — and never the
 * driver's message. Failing open is for an outage only.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { Clock } from '../../src/db/clock.js';
import type { Database } from '../../src/db/connect.js';
import { connect } from '../../src/db/connect.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { Engine } from '../../src/engine/engine.js';
import { createTestDatabase, useTestDatabase } from '../helpers/database.js';
import { post, type Answer } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { buildApp, counters, listen, placeOrder, serveApp, type ServedApp } from '../helpers/trpc-app.js';

const db = useTestDatabase({ max: 20 });
let engine: Engine;
let app: ReturnType<typeof buildApp>;
let url = '';

const auth = { authorization: 'Bearer tenant-a' };
const keyed = (key: string) => ({ ...auth, 'idempotency-key': `"${key}"` });
const orders = async (sku: string) => (await db().sql`select count(*)::int as n from trpc_orders where sku = ${sku}`)[0]!.n as number;
const statusOf = (base: string, key: string) =>
  fetch(`${base}/workflows.place.status?input=${encodeURIComponent(JSON.stringify({ key }))}`, { headers: auth }).then(
    async (response): Promise<Answer> => {
      const body = await response.text();
      return { status: response.status, body, headers: response.headers, json: JSON.parse(body) };
    },
  );

/** A pool on a port nothing listens on: every query fails with ECONNREFUSED. */
function deadDatabase(): Database {
  const sql = postgres('postgres://postgres@127.0.0.1:1/none', { max: 1, connect_timeout: 1, onnotice: () => {} });
  return { url: 'postgres://postgres@127.0.0.1:1/none', sql, db: drizzle({ client: sql }), close: () => sql.end({ timeout: 0 }) };
}

/** An answer that names nothing of the connection: no driver code, host or port. */
function expectNoConnectionDetails(answer: Answer, port: string): void {
  expect(answer.body).not.toMatch(/ECONNREFUSED|CONNECTION_|terminat|127\.0\.0\.1/);
  expect(answer.body).not.toContain(`:${port}`);
}

let served: ServedApp;
beforeAll(async () => {
  ({ url, app, engine } = served = await serveApp(db()));
});
afterAll(() => served.close());

describe('Postgres unavailable', () => {
  it('answers 503 + Retry-After when the connection drops inside the resolver, and releases the key', async () => {
    // A pool of its own: the resolver kills its connection, and the file's pool is left alone.
    const own = connect(db().url, { max: 2 });
    const dropping = buildApp(new Ledger({ sql: own.sql }), engine);
    const droppingUrl = await listen(dropping.server);
    try {
      const key = uniqueKey('dropped');
      const before = counters.create;
      for (let attempt = 0; attempt < 2; attempt += 1) {
        const answer = await post(droppingUrl, 'orders.create', { sku: 'dropped', quantity: 1, fail: 'disconnect' }, keyed(key));
        expect(answer.status).toBe(503);
        expect(answer.headers.get('retry-after')).toBe('1');
        expectNoConnectionDetails(answer, new URL(db().url).port || '5432');
      }
      expect(counters.create - before).toBe(2);
      expect(await orders('dropped')).toBe(0);
      expect(await db().sql`select 1 from stepkey.ledger where scope = 'tenant-a' and key = ${key}`).toHaveLength(0);
    } finally {
      dropping.server.close();
      await own.sql.end({ timeout: 0 });
    }
  });

  it('answers 503 + Retry-After from workflow procedures and createWorkflowRouter, without connection details', async () => {
    const dead = deadDatabase();
    const deadEngine = new Engine({ database: dead, workflows: [placeOrder], clock: new Clock(), onError: () => {} });
    const down = buildApp(new Ledger({ sql: dead.sql, clock: new Clock() }), deadEngine);
    const downUrl = await listen(down.server);
    try {
      const answers = [
        await post(downUrl, 'orders.place', { sku: 'down', quantity: 1 }, keyed(uniqueKey('down-place'))),
        await post(downUrl, 'workflows.place.start', { sku: 'down', quantity: 1 }, keyed(uniqueKey('down-start'))),
        await statusOf(downUrl, uniqueKey('down-status')),
      ];
      for (const answer of answers) {
        expect(answer.status).toBe(503);
        expect(answer.headers.get('retry-after')).toBe('1');
        expect(answer.body).toMatch(/database is unavailable/);
        expectNoConnectionDetails(answer, '1');
      }
    } finally {
      down.server.close();
      await deadEngine.shutdown();
      await dead.close();
    }
  });

  it('gives a fail-open resolver { key, scope, bypassed } and no transaction to write in', async () => {
    const dead = deadDatabase();
    const down = buildApp(new Ledger({ sql: dead.sql, clock: new Clock() }), engine);
    const downUrl = await listen(down.server);
    try {
      const answer = await post(downUrl, 'orders.probe', { text: 'probe' }, keyed(uniqueKey('probe')));
      expect(answer.status).toBe(200);
      expect((answer.json as { result: { data: unknown } }).result.data).toEqual({ fields: ['bypassed', 'key', 'scope'] });
    } finally {
      down.server.close();
      await dead.close();
    }
  });
});

describe('a run that continues elsewhere', () => {
  it('answers 409 + Retry-After when the workflow lost its lease to another process', async () => {
    const leaseLost = {
      registry: { require: () => {} },
      attempt: async () => {
        throw new StepkeyError('lease_lost', 'Another process took this run over; it continues there.');
      },
    } as unknown as Engine;
    const elsewhere = buildApp(new Ledger({ sql: db().sql }), leaseLost);
    const elsewhereUrl = await listen(elsewhere.server);
    try {
      const answer = await post(elsewhereUrl, 'orders.place', { sku: 'elsewhere', quantity: 1 }, keyed(uniqueKey('lease')));
      expect(answer.status).toBe(409);
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(answer.body).toMatch(/continues in another process/);
    } finally {
      elsewhere.server.close();
    }
  });
});

describe('other database failures', () => {
  it('answer 500 without the SQL error, and never fail open: a database without stepkey tables says to migrate', async () => {
    const created = await createTestDatabase();
    const broken = connect(created.url, { max: 2 });
    try {
      await broken.sql`drop schema stepkey cascade`;
      const app2 = buildApp(new Ledger({ sql: broken.sql }), engine);
      const brokenUrl = await listen(app2.server);
      try {
        const open = await post(brokenUrl, 'orders.bestEffort', { text: 'must not run' }, keyed(uniqueKey('no-schema')));
        const closed = await post(brokenUrl, 'orders.refund', { sku: 'no-schema', quantity: 1 }, keyed(uniqueKey('no-schema')));
        for (const answer of [open, closed]) {
          expect(answer.status).toBe(500);
          expect(answer.body).toMatch(/no stepkey tables yet: run `stepkey migrate`/);
          expect(answer.body).not.toMatch(/stepkey\.ledger|does not exist/);
        }
        expect(open.body).not.toMatch(/must not run/);
      } finally {
        app2.server.close();
      }
    } finally {
      // A failed claim rolls back in the background: close without waiting for it.
      await broken.sql.end({ timeout: 0 });
      await created.drop();
    }
  });
});
