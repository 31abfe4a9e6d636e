/**
 * The app the browser test drives the dashboard against: real workflows on a
 * real engine and worker. A switch table decides what fails:
 *
 *   order       tx reserve, call charge (the "payment service" is a ledger
 *               of its own, scope payments/demo, keyed by the step's key),
 *               enqueue an email, tx done
 *   slow        waits in a call step until the 'release' switch is on (to cancel it)
 *   flaky       its charge fails while 'payments-down' is on; two attempts, then
 *               the run fails, resumable
 *   hostile     an input full of markup, and an error message with more
 *   reminder    parks for a day (a waiting run)
 *   batch       on the queue 'batches' (2 slots, 1 per tenant): waits in a call
 *               step until the 'batches-go' switch is on
 *   email.send  fails for good (one attempt) while 'mail-down' is on
 *
 * Also the --app module of `stepkey dashboard` in that test.
 */
import { z } from 'zod';
import type { Sql } from '../../src/db/connect.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { defineQueue } from '../../src/flow/define-queue.js';

let shopSql: Sql | undefined;
export function useShopDatabase(sql: Sql): void {
  shopSql = sql;
}
const db = (): Sql => {
  if (!shopSql) throw new Error('useShopDatabase() first');
  return shopSql;
};

async function switchOn(name: string): Promise<boolean> {
  const [row] = await db()`select enabled from browser_switch where name = ${name}`;
  return row?.enabled === true;
}

export const sendEmail = defineEffect({
  name: 'email.send',
  payload: z.object({ to: z.string(), item: z.string() }),
  maxAttempts: 1,
  async handler(email, { sql }) {
    if (await switchOn('mail-down')) throw new Error(`mail server refused ${email.to}`);
    await sql`insert into browser_mail (recipient, item) values (${email.to}, ${email.item})`;
  },
});

const charge = async (key: string, cents: number) =>
  (
    await new Ledger({ sql: db() }).once(
      { scope: 'payments/demo', key, fingerprint: `charge:${cents}`, name: 'payments.charge' },
      async () => ({ id: `ch_${key.slice(0, 10)}`, amountCents: cents }),
    )
  ).state;

export const order = defineWorkflow({
  name: 'order',
  version: 1,
  input: z.object({ item: z.string(), cents: z.number().int().positive(), email: z.string() }),
  steps: {
    reserve: step('reserve-stock.v1'),
    charge: step('charge-card.v1', { output: z.object({ paymentId: z.string() }) }),
    confirm: step('send-confirmation.v1'),
    done: step('mark-paid.v1'),
  },
  async run({ input, steps }) {
    await steps.reserve.tx(async (_db, { sql }) => {
      await sql`insert into browser_orders (item) values (${input.item})`;
      return { reserved: input.item };
    });
    const { paymentId } = await steps.charge.call(async ({ key }) => {
      await charge(key, input.cents);
      return { paymentId: `ch_${key.slice(0, 10)}` };
    });
    await steps.confirm.enqueue(sendEmail, { to: input.email, item: input.item });
    await steps.done.tx(async () => 'paid');
    return { paymentId, status: 'paid' };
  },
});

export const slow = defineWorkflow({
  name: 'slow',
  version: 1,
  input: z.object({ job: z.string() }),
  steps: { wait: step('wait-for-release.v1', { timeoutMs: 600_000 }) },
  async run({ steps }) {
    await steps.wait.call(async ({ signal }) => {
      while (!(await switchOn('release'))) {
        if (signal.aborted) throw signal.reason;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return 'released';
    });
    return 'done';
  },
});

export const flaky = defineWorkflow({
  name: 'flaky',
  version: 2,
  input: z.object({ cents: z.number().int() }),
  steps: { charge: step('charge-card.v1', { retry: { attempts: 2, initialDelayMs: 50 } }) },
  async run({ input, steps }) {
    return steps.charge.call(async ({ key }) => {
      if (await switchOn('payments-down')) throw new Error('payment service unavailable (503)');
      await charge(key, input.cents);
      return { charged: input.cents };
    });
  },
});

export const hostile = defineWorkflow({
  name: 'hostile',
  version: 1,
  input: z.object({ note: z.string() }),
  steps: { check: step('check-note.v1') },
  async run({ input, steps }) {
    await steps.check.tx(async () => {
      throw new NonRetryableError(`rejected note <script>window.__xss = 'error'</script><img src=x onerror="window.__xss='img'"> ${input.note.length}`);
    });
  },
});

export const reminder = defineWorkflow({
  name: 'reminder',
  version: 1,
  input: z.object({ to: z.string() }),
  steps: { later: step('wait-a-day.v1') },
  async run({ steps }) {
    await steps.later.sleep(24 * 60 * 60 * 1000);
    return 'reminded';
  },
});

export const batch = defineWorkflow({
  name: 'batch',
  version: 1,
  input: z.object({ tenant: z.string(), n: z.number().int() }),
  steps: { work: step('batch-work.v1', { timeoutMs: 600_000 }) },
  async run({ input, steps }) {
    await steps.work.call(async ({ signal }) => {
      while (!(await switchOn('batches-go'))) {
        if (signal.aborted) throw signal.reason;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    });
    return { tenant: input.tenant, n: input.n };
  },
});
export const batches = defineQueue<{ tenant: string; n: number }>({
  name: 'batches',
  concurrency: 2,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 1 },
});

export const workflows = [order, slow, flaky, hostile, reminder, batch];
export const queues = [batches];
export const effects = [sendEmail];

export const shopTables = `
  create table if not exists browser_switch (name text primary key, enabled boolean not null);
  create table if not exists browser_orders (id bigserial primary key, item text not null);
  create table if not exists browser_mail (id bigserial primary key, recipient text not null, item text not null)`;
