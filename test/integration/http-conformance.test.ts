/**
 * The Idempotency-Key conformance suite: one set of cases, run against the
 * tRPC option and both stepkey/http adapters through real servers —
 * tRPC's standalone server, node:http, Express, Hono — on real Postgres,
 * reached through a TCP proxy that a case takes down for a real outage.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type Database } from '../../src/db/connect.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { entered, gate, send, targets, type Operation, type Reply, type Target, type TargetName } from '../helpers/conformance-servers.js';
import { useTestDatabase } from '../helpers/database.js';
import { rawPost } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { proxy, type TcpProxy } from '../helpers/tcp-proxy.js';

const db = useTestDatabase({ max: 10 });
let relay: TcpProxy;
let viaRelay: Database;

beforeAll(async () => {
  await db().sql`create table conformance_effects (id bigserial primary key, scope text not null, operation text not null, sku text not null)`;
  relay = proxy(new URL(db().url));
  await relay.up();
  viaRelay = connect(relay.url, { max: 60 });
});
afterAll(async () => {
  await viaRelay.close();
  await relay.down().catch(() => {});
});

const auth = (tenant = 'tenant-a') => ({ authorization: `Bearer ${tenant}` });
const keyed = (key: string, tenant = 'tenant-a') => ({ ...auth(tenant), 'idempotency-key': `"${key}"` });
const effects = async (sku: string) => (await db().sql`select count(*)::int as n from conformance_effects where sku = ${sku}`)[0]!.n as number;
const ledgerRow = async (key: string) => (await db().sql`select status from stepkey.ledger where key = ${key}`)[0];
const order = (sku: string, extra: object = {}) => JSON.stringify({ sku, quantity: 1, ...extra });

describe.each(Object.keys(targets) as TargetName[])('%s', (name) => {
  let target: Target;
  let prefix = '';
  beforeAll(async () => {
    target = await targets[name](new Ledger({ sql: viaRelay.sql }));
    prefix = `${name}-`;
  });
  afterAll(() => target.close());

  const call = (operation: Operation, body: string, headers: Record<string, string>): Promise<Reply> => send(target.url(operation), body, headers);
  const sku = (what: string) => `${prefix}${what}`;

  it('answers 400 naming the header to a missing, malformed or duplicated key, and runs nothing', async () => {
    const missing = await call('charge', order(sku('no-key')), auth());
    expect(missing.status).toBe(400);
    expect(missing.body).toMatch(/Idempotency-Key header/);
    const url = new URL(target.url('charge'));
    for (const lines of [['Idempotency-Key: "abc'], ['Idempotency-Key: "a"', 'Idempotency-Key: "b"'], ['Idempotency-Key: "a", "b"'], ['Idempotency-Key: ""']]) {
      const answer = await rawPost(url.origin, url.pathname.slice(1), { sku: sku('bad-key'), quantity: 1 }, ['Authorization: Bearer tenant-a', ...lines]);
      expect(answer.status, lines.join(' | ')).toBe(400);
    }
    expect(entered.get(sku('no-key')) ?? 0).toBe(0);
    expect(entered.get(sku('bad-key')) ?? 0).toBe(0);
    expect(await effects(sku('bad-key'))).toBe(0);
  });

  it('takes a key of 255 characters and refuses one of 256', async () => {
    const longest = `${prefix}${'k'.repeat(255 - prefix.length)}`;
    expect((await call('charge', order(sku('k255')), keyed(longest))).status).toBe(target.created);
    const over = await call('charge', order(sku('k256')), keyed(`${longest}k`));
    expect(over.status).toBe(400);
    expect(over.body).toMatch(/255/);
    expect(await effects(sku('k256'))).toBe(0);
  });

  it('keeps keys case-sensitive: two keys differing in case are two requests', async () => {
    const key = uniqueKey(`${prefix}Case`);
    const upper = await call('charge', order(sku('case')), keyed(key));
    const lower = await call('charge', order(sku('case')), keyed(key.toLowerCase()));
    expect(upper.status).toBe(target.created);
    expect(lower.status).toBe(target.created);
    expect(lower.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(sku('case'))).toBe(2);
  });

  it('replays byte for byte, with Idempotent-Replayed on the replay only — reordered JSON keys included', async () => {
    const key = uniqueKey(prefix);
    const first = await call('charge', JSON.stringify({ sku: sku('replay'), quantity: 2 }), keyed(key));
    const again = await call('charge', JSON.stringify({ quantity: 2, sku: sku('replay') }), keyed(key));
    const spaced = await call('charge', `{ "quantity" : 2,\n  "sku": ${JSON.stringify(sku('replay'))} }`, { ...auth(), 'idempotency-key': key });
    expect(first.status).toBe(target.created);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body).toMatch(/"zeta":1,"alpha":\[3,1,2\]/);
    for (const replay of [again, spaced]) {
      expect(replay.status).toBe(first.status);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
      expect(replay.body).toBe(first.body);
    }
    expect(entered.get(sku('replay'))).toBe(1);
    expect(await effects(sku('replay'))).toBe(1);
  });

  it('answers 422 to the key with a changed body or on another route, and changes nothing', async () => {
    const key = uniqueKey(prefix);
    const first = await call('charge', order(sku('mismatch')), keyed(key));
    const changed = await call('charge', order(sku('mismatch'), { quantity: 2 }), keyed(key));
    const otherRoute = await call('refund', order(sku('mismatch')), keyed(key));
    expect(changed.status).toBe(422);
    expect(changed.body).toMatch(/different input/);
    expect(otherRoute.status).toBe(422);
    expect(otherRoute.body).toMatch(/another operation/);
    expect(await effects(sku('mismatch'))).toBe(1);
    expect((await call('charge', order(sku('mismatch')), keyed(key))).body).toBe(first.body);
  });

  it('answers 401 to an anonymous caller and stores nothing', async () => {
    const key = uniqueKey(prefix);
    const answer = await call('charge', order(sku('anonymous')), { 'idempotency-key': `"${key}"` });
    expect(answer.status).toBe(401);
    expect(await ledgerRow(key)).toBeUndefined();
    expect(entered.get(sku('anonymous')) ?? 0).toBe(0);
  });

  it('answers a duplicate 409 with Retry-After while the first works; 50 concurrent identical calls make one effect', async () => {
    const key = uniqueKey(prefix);
    const held = gate(key);
    let answered = 0;
    const calls = Array.from({ length: 50 }, () =>
      call('charge', order(sku('fifty'), { gate: key }), keyed(key)).then((reply) => {
        answered += 1;
        return reply;
      }),
    );
    // The winner waits at its gate: all 49 others are answered before it is let go.
    await expect.poll(() => answered).toBe(49);
    held.open();
    const replies = await Promise.all(calls);
    expect(replies.filter((reply) => reply.status === target.created)).toHaveLength(1);
    const busy = replies.filter((reply) => reply.status === 409);
    expect(busy).toHaveLength(49);
    for (const reply of busy) expect(Number(reply.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(entered.get(sku('fifty'))).toBe(1);
    expect(await effects(sku('fifty'))).toBe(1);
  });

  it('stores a deterministic 4xx and replays it with Idempotent-Replayed; its write rolls back', async () => {
    const key = uniqueKey(prefix);
    const first = await call('charge', order(sku('client'), { fail: 'client' }), keyed(key));
    const second = await call('charge', order(sku('client'), { fail: 'client' }), keyed(key));
    expect(first.status).toBe(404);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.status).toBe(404);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toBe(first.body);
    expect(entered.get(sku('client'))).toBe(1);
    expect(await effects(sku('client'))).toBe(0);
  });

  it('never stores a 5xx, and never shows the SQL or the driver’s text', async () => {
    const key = uniqueKey(prefix);
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await call('charge', order(sku('sql'), { fail: 'sql' }), keyed(key));
      expect(answer.status).toBe(500);
      expect(answer.body).toMatch(/error id err-[0-9a-f]{16}/);
      expect(answer.body).not.toMatch(/conformance_missing_table|does not exist|relation|select|4242|42P01|PostgresError/i);
      expect(answer.headers.get('idempotent-replayed')).toBeNull();
    }
    expect(entered.get(sku('sql'))).toBe(2);
    expect(await ledgerRow(key)).toBeUndefined();
    expect(await effects(sku('sql'))).toBe(0);
  });

  it('answers 503 with Retry-After while Postgres is down, and runs the key once it is back', async () => {
    const key = uniqueKey(prefix);
    await relay.down();
    let down: Reply;
    try {
      down = await call('charge', order(sku('outage')), keyed(key));
    } finally {
      await relay.up();
    }
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('1');
    expect(down.body).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|CONNECTION_/);
    // Once it is back, the client retries as told: on a busy host the first call may still find the
    // pool reconnecting, and is then answered 503 again, with Retry-After. Each such answer is printed.
    const started = Date.now();
    let back = await call('charge', order(sku('outage')), keyed(key));
    while (back.status === 503 && Date.now() - started < PATIENCE_MS) {
      expect(back.headers.get('retry-after')).toBe('1');
      console.warn(`${name}: 503 ${Date.now() - started} ms after Postgres came back: ${back.body}`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      back = await call('charge', order(sku('outage')), keyed(key));
    }
    expect(back.status).toBe(target.created);
    expect(back.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(sku('outage'))).toBe(1);
  });
});
