/**
 * stepkey on Citus under kills: keyed orders (a tx step writing the app's
 * table distributed by tenant and co-located with stepkey's, a call, an
 * effect) while the process running them is SIGKILLed four times and a
 * worker node is restarted. Every key ends with one order row, one charge,
 * one effect applied; no run is left in progress or waiting; the orders sit
 * on both workers. And the tx step's commit takes no two-phase commit: runs
 * that write the co-located table cost as many as runs that write nothing,
 * while a table distributed by another column costs more (the check can fail).
 *
 * Runs in the Citus stage's last group (alone: it restarts a node), with
 * STEPKEY_CITUS_DIR naming the cluster's folder (test/citus/cluster.sh).
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import type { TxSql } from '../../src/db/transaction.js';
import { createEngine } from '../../src/engine/engine.js';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { startPaymentService, type PaymentService } from '../../workflows/payments/service.js';
import { killRef } from '../helpers/scripts/citus-kill-load.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 8 });
const script = fileURLToPath(new URL('../helpers/scripts/citus-kill-load.ts', import.meta.url));
const cluster = fileURLToPath(new URL('./cluster.sh', import.meta.url));
const ORDERS = 80;
const TENANTS = 10;
let payments: PaymentService;

/** What a measured run's tx step writes. */
type Write = (sql: TxSql, scope: string, i: number) => Promise<unknown>;
const children: ChildHandle[] = [];

beforeAll(async () => {
  const sql = db().sql;
  await sql`create table kill_orders (tenant text not null, order_id text not null, cents int not null)`;
  await sql`select create_distributed_table('kill_orders', 'tenant', colocate_with => 'stepkey.ledger')`;
  await sql`create table kill_receipts (message_key text not null, order_id text not null)`;
  await sql`create table kill_elsewhere (tenant text not null, order_id text not null)`;
  await sql`select create_distributed_table('kill_elsewhere', 'order_id')`;
  payments = await startPaymentService({ database: db() });
});

afterAll(async () => {
  for (const child of children) child.kill();
  await payments?.close();
});

function load(): ChildHandle {
  const child = spawnScript(script, {
    args: [db().url, payments.url, String(ORDERS), String(TENANTS)],
    env: { STEPKEY_LEASE_MS: '1500', STEPKEY_SWEEP_INTERVAL_MS: '200' },
  });
  children.push(child);
  return child;
}

const doneCount = (child: ChildHandle) => [...child.output().matchAll(/DONE (\d+)/g)].length;

/** Two-phase commits the coordinator has recorded (pg_dist_transaction rows ever inserted; read once every pool is closed). */
async function twoPhaseCommits(): Promise<number> {
  const [row] = await db().sql<{ n: string }[]>`select n_tup_ins::text as n from pg_stat_sys_tables where relname = 'pg_dist_transaction'`;
  return Number(row?.n ?? 0);
}

/**
 * The count once backends have flushed theirs: the same twice in a row, `apartMs` apart. A closed
 * pool's backends flush as they exit (a second is enough); an idle one may hold its counters up to
 * 10 s (PostgreSQL's idle stats interval).
 */
async function settledTwoPhaseCommits(apartMs = 1_000): Promise<number> {
  let last = await twoPhaseCommits();
  for (const began = Date.now(); Date.now() - began < PATIENCE_MS; ) {
    await new Promise((resolve) => setTimeout(resolve, apartMs));
    const now = await twoPhaseCommits();
    if (now === last) return now;
    last = now;
  }
  throw new Error('the count of two-phase commits did not settle');
}

/** Runs `count` one-step runs whose tx step does `write`, from a pool of its own, closed (its stats flushed) before it returns. */
async function runsWriting(name: string, count: number, write: Write): Promise<void> {
  const database = connect(db().url, { max: 2 });
  const workflow = defineWorkflow({
    name,
    version: 1,
    input: z.object({ i: z.number().int() }),
    steps: { write: step('write.v1') },
    async run({ input, steps, ctx }) {
      await steps.write.tx(async (_db, { sql }) => {
        await write(sql, ctx.scope, input.i);
      });
    },
  });
  const engine = createEngine({ database, workflows: [workflow], onError: () => {} });
  for (let i = 0; i < count; i++) await engine.run(workflow, { scope: `two-phase-${i % 4}`, key: `${name}-${i}` }, { i });
  await engine.shutdown();
  await database.close();
}

describe('stepkey on Citus under kills', () => {
  it('a tx step writing a co-located table commits on one node: no two-phase commit more than a step that writes nothing', async () => {
    const measure = async (name: string, write: Write) => {
      const before = await settledTwoPhaseCommits();
      await runsWriting(name, 12, write);
      return (await settledTwoPhaseCommits()) - before;
    };
    // What this file's setup did (its pool's backends are idle, not closed) is counted first.
    await settledTwoPhaseCommits(11_000);
    const nothing = await measure('tp-nothing', async () => {});
    const colocated = await measure('tp-colocated', (sql, scope, i) => sql`insert into kill_orders (tenant, order_id, cents) values (${scope}, ${`tp-${i}`}, 1)`);
    const elsewhere = await measure('tp-elsewhere', (sql, scope, i) => sql`insert into kill_elsewhere (tenant, order_id) values (${scope}, ${`tp-elsewhere-${i}-x`})`);
    console.log(`two-phase commits for 12 runs: writing nothing ${nothing}, the co-located table ${colocated}, a table distributed otherwise ${elsewhere}`);
    expect(colocated).toBe(nothing);
    // The control: a table distributed by another column puts the row on another node for some runs.
    expect(elsewhere).toBeGreaterThan(nothing);
    await db().sql`delete from kill_orders where order_id like 'tp-%'`;
  });

  it('keeps every order once through four SIGKILLs and a worker restart: one row, one charge, one effect; nothing stuck', async () => {
    const dir = process.env.STEPKEY_CITUS_DIR;
    expect(dir, 'STEPKEY_CITUS_DIR names the cluster folder').toBeTruthy();
    // Each process answers every key from the first (finished ones replay); it is killed a few
    // orders past the furthest any earlier one got, so that each kill lands in new work.
    let reached = 0;
    for (let kill = 0; kill < 4; kill++) {
      const child = load();
      await child.waitFor(new RegExp(`DONE ${reached + 6}\\b`), PATIENCE_MS).catch(() => undefined);
      reached = Math.max(reached, doneCount(child));
      if (kill === 1) {
        // A worker node restarted (fast shutdown, start) while the process runs orders on it.
        execFileSync('bash', [cluster, 'restart', dir!, 'w1'], { stdio: 'ignore', timeout: PATIENCE_MS });
      }
      child.kill('SIGKILL');
      await child.exited;
    }
    const last = load();
    await last.waitFor(/ALL DONE/, PATIENCE_MS);

    const sql = db().sql;
    const refs = Array.from({ length: ORDERS }, (_, i) => killRef(i, TENANTS));
    const [runs] = await sql<{ completed: number; other: number }[]>`
      select count(*) filter (where status = 'completed' and outcome_ok)::int as completed,
             count(*) filter (where status <> 'completed' or not outcome_ok)::int as other
        from stepkey.ledger where kind = 'run' and name = 'kill-order'`;
    expect(runs).toEqual({ completed: ORDERS, other: 0 });
    const [orders] = await sql<{ rows: number; orders: number }[]>`
      select count(*)::int as rows, count(distinct (tenant, order_id))::int as orders from kill_orders where order_id like 'order-%'`;
    expect(orders).toEqual({ rows: ORDERS, orders: ORDERS });
    const [charges] = await sql<{ rows: number; refs: number }[]>`
      select count(*)::int as rows, count(distinct reference)::int as refs from payments.charges where merchant = 'citus-kill-shop'`;
    expect(charges).toEqual({ rows: ORDERS, refs: ORDERS });
    // Effects: delivered at least once, applied once (the consumer's inbox), every one of them — by
    // the last process's worker, which also takes back the jobs the killed ones had locked.
    await expect
      .poll(async () => (await sql<{ n: number }[]>`select count(distinct order_id)::int as n from kill_receipts`)[0]!.n, { timeout: PATIENCE_MS })
      .toBe(ORDERS);
    const [receipts] = await sql<{ rows: number }[]>`select count(*)::int as rows from kill_receipts`;
    expect(receipts!.rows).toBe(ORDERS);
    last.kill('SIGTERM');
    // Every tenant's orders on its scope's node: both workers hold some.
    const placed = await sql<{ port: number; n: string }[]>`
      select nodeport as port, result as n from run_command_on_placements('kill_orders', 'select count(*) from %s') where success`;
    const byPort = new Map<number, number>();
    for (const row of placed) byPort.set(row.port, (byPort.get(row.port) ?? 0) + Number(row.n));
    expect([...byPort.values()].filter((n) => n > 0)).toHaveLength(2);
    expect(refs).toHaveLength(ORDERS);
  });
});
