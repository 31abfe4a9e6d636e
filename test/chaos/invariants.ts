/**
 * What must hold once the faults are over and the app has settled, read from
 * the shop's own tables (the orders), the payment stand-in's (its charges),
 * the mail stand-in's (the mailbox), stepkey's ledger and graphile-worker's
 * jobs. Each failed check is one line of the report.
 */
import type postgres from 'postgres';
import type { KeyRecord } from './load.js';

export interface KeyCheck {
  tenant: string;
  key: string;
  status: string | null;
  orders: number;
  order_id: string | null;
  order_status: string | null;
  order_payment: string | null;
  charges: number;
  charge_id: string | null;
  emails: number;
}

/** One row per key the load sent: its run's status and what exists downstream for it. */
export async function checkKeys(sql: postgres.Sql, keys: KeyRecord[]): Promise<KeyCheck[]> {
  return sql<KeyCheck[]>`
    with k(tenant, key) as (select * from unnest(${keys.map((k) => k.tenant)}::text[], ${keys.map((k) => k.key)}::text[])),
    run as (
      select k.tenant, k.key, l.status, l.root_key
        from k left join stepkey.ledger l on l.scope = k.tenant and l.key = k.key and l.parent_key is null
    ),
    o as (
      select run.*, count(o.id) over (partition by run.tenant, run.key) as orders, o.id, o.status as order_status, o.payment_id
        from run left join shop.orders o on o.run_key = run.root_key
    )
    select o.tenant, o.key, o.status, o.orders::int as orders, o.id::text as order_id, o.order_status, o.payment_id as order_payment,
           (select count(*)::int from payments.charges c where c.reference = 'order-' || o.id) as charges,
           (select min(c.id) from payments.charges c where c.reference = 'order-' || o.id) as charge_id,
           (select count(*)::int from shop.mailbox m where m.subject = 'Order ' || o.id || ' confirmed') as emails
      from o`;
}

export interface Totals {
  orders: number;
  charges: number;
  emails: number;
  /** Root ledger rows (requests, runs, the payment service's charges) by kind and status. */
  roots: { kind: string; status: string; count: number }[];
  jobs: { total: number; locked: number; due: number; failed: number };
}

export async function readTotals(sql: postgres.Sql): Promise<Totals> {
  const [counts] = await sql<{ orders: number; charges: number; emails: number }[]>`
    select (select count(*)::int from shop.orders) as orders,
           (select count(*)::int from payments.charges) as charges,
           (select count(*)::int from shop.mailbox) as emails`;
  const roots = await sql<{ kind: string; status: string; count: number }[]>`
    select kind, status, count(*)::int as count from stepkey.ledger where parent_key is null group by 1, 2 order by 1, 2`;
  const [jobs] = await sql<Totals['jobs'][]>`
    select count(*)::int as total,
           count(*) filter (where locked_at is not null)::int as locked,
           count(*) filter (where run_at <= now() and attempts < max_attempts)::int as due,
           count(*) filter (where attempts >= max_attempts)::int as failed
      from graphile_worker.jobs`;
  return { ...counts!, roots, jobs: jobs! };
}

/** Whether the app has caught up: nothing in progress, nothing locked, every order mailed. */
export function settled(totals: Totals): boolean {
  return (
    totals.roots.every((row) => row.status === 'completed') &&
    totals.jobs.locked === 0 &&
    totals.jobs.due === 0 &&
    totals.emails === totals.orders
  );
}

/** The failures, one line each (at most a few examples per kind). */
export function keyFailures(keys: KeyRecord[], checks: KeyCheck[], totals: Totals): string[] {
  const failures: string[] = [];
  const byKey = new Map(checks.map((row) => [`${row.tenant}/${row.key}`, row]));
  const groups = new Map<string, string[]>();
  const fail = (what: string, key: string) => groups.set(what, [...(groups.get(what) ?? []), key]);
  for (const sent of keys) {
    const id = `${sent.tenant}/${sent.key}`;
    const row = byKey.get(id);
    if (sent.failure) fail(`key without a 200 (${sent.failure.slice(0, 120)})`, id);
    if (!row || row.status === null) {
      fail('key with no run in the ledger', id);
      continue;
    }
    if (row.status !== 'completed') fail(`run ${row.status}, not completed`, id);
    if (row.orders !== 1) fail(`key with ${row.orders} orders`, id);
    if (row.orders === 0) continue;
    if (row.charges !== 1) fail(`order with ${row.charges} charges`, id);
    if (row.emails !== 1) fail(`order with ${row.emails} emails`, id);
    if (row.order_status !== 'paid') fail(`order ${row.order_status}, not paid`, id);
    if (sent.answer && String(sent.answer.orderId) !== row.order_id) fail('answer names another order', id);
    if (sent.answer && (sent.answer.paymentId !== row.charge_id || row.order_payment !== row.charge_id)) {
      fail('answer, order and charge disagree on the payment', id);
    }
  }
  for (const [what, ids] of groups) failures.push(`${ids.length} × ${what}: ${ids.slice(0, 3).join(', ')}${ids.length > 3 ? ', …' : ''}`);
  const keyed = checks.filter((row) => row.orders > 0).length;
  if (totals.orders !== keyed) failures.push(`${totals.orders} orders in all, for ${keyed} keys with an order`);
  if (totals.charges !== totals.orders) failures.push(`${totals.charges} charges for ${totals.orders} orders`);
  if (totals.emails !== totals.orders) failures.push(`${totals.emails} emails for ${totals.orders} orders`);
  for (const row of totals.roots) {
    if (row.status !== 'completed') failures.push(`${row.count} ${row.kind} row(s) left ${row.status}`);
  }
  if (totals.jobs.locked > 0) failures.push(`${totals.jobs.locked} graphile-worker job(s) still locked`);
  if (totals.jobs.due > 0) failures.push(`${totals.jobs.due} graphile-worker job(s) due and never run`);
  if (totals.jobs.failed > 0) failures.push(`${totals.jobs.failed} graphile-worker job(s) out of attempts`);
  return failures;
}
