/**
 * The API server killed with SIGKILL after its commit and before its answer:
 * the client's retry with the same key gets the stored answer, and nothing
 * runs twice. A workflow procedure killed mid-run resumes on the retry.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/trpc-server.ts', import.meta.url));
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table trpc_orders (id bigserial primary key, tenant text not null, sku text not null, quantity int not null)`;
});
afterAll(() => {
  for (const child of children) child.kill();
});

async function server(faults?: string): Promise<{ url: string; child: ChildHandle }> {
  const child = spawnScript(script, {
    args: [db().url],
    env: { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200' },
    ...(faults ? { faults } : {}),
  });
  children.push(child);
  const [, url] = (await child.waitFor(/URL (\S+)/, PATIENCE_MS)) as unknown as [string, string];
  return { url, child };
}

const headers = (key: string) => ({ authorization: 'Bearer tenant-a', 'idempotency-key': `"${key}"` });
const orders = async (sku: string) => (await db().sql`select count(*)::int as n from trpc_orders where sku = ${sku}`)[0]!.n as number;

describe('API server crashes', () => {
  it('replays after a kill between the commit and the response', async () => {
    const doomed = await server('trpc.before-response:orders.create');
    const key = uniqueKey('kill');
    await expect(post(doomed.url, 'orders.create', { sku: 'killed', quantity: 1 }, headers(key))).rejects.toThrow();
    expect((await doomed.child.exited).signal).toBe('SIGKILL');
    expect(await orders('killed')).toBe(1);

    const next = await server();
    const retry = await post(next.url, 'orders.create', { sku: 'killed', quantity: 1 }, headers(key));
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await orders('killed')).toBe(1);
  });

  it('resumes a workflow procedure killed mid-run when the request is retried', async () => {
    const doomed = await server('engine.after-step-commit:record.v1');
    const key = uniqueKey('wf-kill');
    await expect(post(doomed.url, 'orders.place', { sku: 'wf-killed', quantity: 1 }, headers(key))).rejects.toThrow();
    expect((await doomed.child.exited).signal).toBe('SIGKILL');

    const next = await server();
    let answer = await post(next.url, 'orders.place', { sku: 'wf-killed', quantity: 1 }, headers(key));
    for (const deadline = Date.now() + PATIENCE_MS; answer.status === 409 && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, Number(answer.headers.get('retry-after') ?? 1) * 1000));
      answer = await post(next.url, 'orders.place', { sku: 'wf-killed', quantity: 1 }, headers(key));
    }
    expect(answer.status).toBe(200);
    expect((answer.json as { result: { data: unknown } }).result.data).toMatchObject({ sku: 'wf-killed' });
    expect(await orders('wf-killed')).toBe(1);
  });
});
