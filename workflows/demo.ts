/**
 * `npm run demo`, against a running `npm start`: the retries that break
 * naive APIs, and what stepkey makes of them. Concurrent duplicates, a retry
 * with the same key, a changed body under an old key, a payment service that
 * fails and recovers, a worker killed while it delivers emails, an order for
 * more than is in stock. Then one row per key: orders, charges and emails in
 * the database, and the answers the client got.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { childKey, rootKey } from 'stepkey';
import { dataDir } from './supervisor/paths.js';
import { readState } from './supervisor/state-file.js';

const state = readState(dataDir());
const tenant = `demo-${randomBytes(3).toString('hex')}`;
const sql = postgres(state.databaseUrl, { max: 2, onnotice: () => {} });

interface Tally {
  scenario: string;
  expectOrder: boolean;
  answers: Map<string, number>;
}
const keys = new Map<string, Tally>();

function note(key: string, answer: string): void {
  const answers = keys.get(key)!.answers;
  answers.set(answer, (answers.get(answer) ?? 0) + 1);
}

async function order(key: string, body: object, options: { retry?: boolean } = {}): Promise<number> {
  for (let attempt = 1; ; attempt += 1) {
    const response = await fetch(`${state.apiUrl}/orders.create`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant}`, 'content-type': 'application/json', 'idempotency-key': `"${key}"` },
      body: JSON.stringify(body),
    });
    await response.text();
    const replayed = response.headers.get('idempotent-replayed') === 'true';
    note(key, replayed ? `${response.status} replay` : String(response.status));
    const retryable = response.status === 409 || response.status === 503;
    if (!options.retry || !retryable || attempt >= 20) return response.status;
    await new Promise((resolve) => setTimeout(resolve, 1000 * Number(response.headers.get('retry-after') ?? 1)));
  }
}

function scenario(name: string, key: string, expectOrder = true): string {
  keys.set(key, { scenario: name, expectOrder, answers: new Map() });
  return key;
}

async function payments(settings: { failRate?: number; delayMs?: number }): Promise<void> {
  await fetch(`${state.paymentsUrl}/admin/settings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(settings),
  });
}

const espresso = { sku: 'sku-espresso', quantity: 1, email: 'ada@example.com' };
const step = (text: string) => console.log(`\n▸ ${text}`);

step('10 concurrent requests with one key (the payment service answers slowly, so they overlap)');
await payments({ delayMs: 500 });
const burst = scenario('concurrent duplicates', 'burst');
await Promise.all(Array.from({ length: 10 }, () => order(burst, espresso)));
await payments({ delayMs: 0 });

step('the client retries with the same key, twice');
await order(burst, espresso, { retry: true });
await order(burst, espresso);

step('the same key again with a changed body');
await order(burst, { ...espresso, quantity: 2 });

step('the payment service fails every charge, then recovers while the order waits');
const flaky = scenario('payments fail, then recover', 'flaky');
await payments({ failRate: 1 });
const pending = order(flaky, espresso, { retry: true });
await new Promise((resolve) => setTimeout(resolve, 1500));
await payments({ failRate: 0 });
await pending;

step('5 orders, and the worker is killed (SIGKILL) while it sends their emails');
const batch = Array.from({ length: 5 }, (_, i) => scenario('worker killed mid-delivery', `batch-${i + 1}`));
await Promise.all(batch.map((key) => order(key, espresso, { retry: true })));
try {
  process.kill(readState(dataDir()).worker, 'SIGKILL');
  console.log('  worker killed; npm start starts another, which takes over the dead worker’s jobs');
} catch {
  console.log('  (the worker had already gone)');
}

step('more kettles than there are: a client error, stored and replayed');
const kettles = scenario('out of stock (stored 4xx)', 'kettles', false);
await order(kettles, { sku: 'sku-kettle', quantity: 50, email: 'ada@example.com' });
await order(kettles, { sku: 'sku-kettle', quantity: 50, email: 'ada@example.com' });

async function counts(key: string) {
  // The run's stored root: what its step keys derive from.
  const [run] = await sql<{ root: string | null }[]>`select root_key as root from stepkey.ledger where scope = ${tenant} and key = ${key}`;
  const root = run?.root ?? rootKey(tenant, key);
  const [row] = await sql`
    select (select count(*)::int from shop.orders where run_key = ${root}) as orders,
           (select count(*)::int from payments.charges where idempotency_key = ${childKey(root, 'charge-card.v1')}) as charges,
           (select count(*)::int from shop.mailbox where message_key = ${childKey(root, 'send-confirmation.v1')}) as emails`;
  return row as { orders: number; charges: number; emails: number };
}

step('waiting for every email');
const deadline = Date.now() + 90_000;
for (const [key, tally] of keys) {
  while (tally.expectOrder && (await counts(key)).emails < 1 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const rows: string[][] = [['key', 'scenario', 'orders', 'charges', 'emails', 'answers the client got']];
let ok = true;
for (const [key, tally] of keys) {
  const found = await counts(key);
  const expected = tally.expectOrder ? 1 : 0;
  const right = found.orders === expected && found.charges === expected && found.emails === expected;
  ok &&= right;
  const answers = [...tally.answers].map(([answer, n]) => `${n}× ${answer}`).join(', ');
  rows.push([key, tally.scenario, String(found.orders), String(found.charges), String(found.emails), `${answers}${right ? '' : '   ✗'}`]);
}
const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
console.log(`\nTenant ${tenant}:\n`);
rows.forEach((row, index) => {
  console.log(`  ${row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ')}`);
  if (index === 0) console.log(`  ${widths.map((w) => '─'.repeat(w)).join('  ')}`);
});
console.log(ok ? '\nEvery key: one order, one charge, one email (none for the refused one).' : '\nSome keys do not add up: see ✗.');
await sql.end();
process.exit(ok ? 0 : 1);
