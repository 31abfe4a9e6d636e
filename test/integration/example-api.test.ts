/**
 * The example shop's order API (workflows/api) over real HTTP, on the test
 * file's database: what a client of `npm start` gets.
 */
import type { AddressInfo } from 'node:net';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext } from '../../workflows/api/context.js';
import { createApiRouter } from '../../workflows/api/router.js';
import { checkout } from '../../workflows/checkout.js';
import { seed } from '../../workflows/seed.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
let url = '';
let close = async () => {};

beforeAll(async () => {
  await seed(db());
  const engine = testEngine(db(), [checkout]);
  const server = createHTTPServer({ router: createApiRouter(db(), engine), basePath: '/trpc/', createContext });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/trpc`;
  close = async () => {
    server.close();
    await engine.shutdown();
  };
});
afterAll(() => close());

const keyed = (key: string) => ({ authorization: 'Bearer acme', 'idempotency-key': `"${key}"` });

describe('the example order API', () => {
  it('stores an out-of-stock answer and replays it marked Idempotent-Replayed', async () => {
    const key = uniqueKey('kettles');
    const order = { sku: 'sku-kettle', quantity: 50, email: 'ada@example.com' };
    const first = await post(url, 'orders.create', order, keyed(key));
    const second = await post(url, 'orders.create', order, keyed(key));
    expect(first.status).toBe(400);
    expect(first.body).toMatch(/Not enough stock of sku-kettle/);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.status).toBe(400);
    expect(second.body).toBe(first.body);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
  });
});
