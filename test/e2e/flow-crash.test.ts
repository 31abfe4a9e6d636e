/**
 * Flow control across three worker processes, one of them SIGKILLed while
 * its runs hold slots: the killed process's runs are taken over in the slots
 * they held (no second slot), every run completes once (each tx step
 * recorded once), the queue's limits hold at every instant, and no slot is
 * held once every run has ended.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { maxOverlap, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/flow-workers.ts', import.meta.url));
const LEASE_MS = 1_000;
const env = { STEPKEY_LEASE_MS: String(LEASE_MS), STEPKEY_SWEEP_INTERVAL_MS: '200' };
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table flow_e2e (run text not null, tenant text not null, step text not null, pid int not null, at timestamptz not null)`;
});
afterAll(() => {
  for (const child of children) child.kill();
});

function spawn(args: string[]): ChildHandle {
  const child = spawnScript(script, { args: [args[0]!, db().url, ...args.slice(1)], env });
  children.push(child);
  return child;
}

describe('three workers, one SIGKILLed', () => {
  it('give the killed worker’s slots back within about a lease; nothing runs twice; no slot is left', async () => {
    const prefix = uniqueKey('e2e');
    const workers = [spawn(['work']), spawn(['work']), spawn(['work'])];
    await Promise.all(workers.map((worker) => worker.waitFor(/READY/, PATIENCE_MS)));
    const enqueuer = spawn(['enqueue', prefix, '150']);
    await enqueuer.waitFor(/ENQUEUED/, PATIENCE_MS);
    // Wait until a worker holds runs that have begun and not ended: that one is killed.
    const pids = workers.map((worker) => worker.pid);
    let victimPid = 0;
    await expect
      .poll(
        async () => {
          const [row] = await db().sql<{ pid: number }[]>`
            select b.pid from flow_e2e b
             where b.step = 'begin' and b.pid = any(${pids}::int[])
               and not exists (select 1 from flow_e2e e where e.run = b.run and e.step = 'end')
             limit 1`;
          victimPid = row?.pid ?? 0;
          return victimPid;
        },
        { interval: 20 },
      )
      .toBeGreaterThan(0);
    const victim = workers.find((worker) => worker.pid === victimPid)!;
    victim.kill('SIGKILL');
    const killedAt = Date.now();
    const [{ killed_us: killedUs } = { killed_us: 0 }] = await db().sql<{ killed_us: number }[]>`
      select (extract(epoch from clock_timestamp()) * 1e6)::float8 as killed_us`;
    await victim.exited;
    // A COMMIT already on the wire when the process died still lands: the runs it left unfinished
    // are known only once its backends are gone.
    await expect
      .poll(
        async () =>
          (await db().sql<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity where application_name = ${`flow-worker-${victim.pid}`}`)[0]!.n,
        { interval: 20 },
      )
      .toBe(0);
    const orphans = await db().sql<{ run: string }[]>`
      select b.run from flow_e2e b
       where b.step = 'begin' and b.pid = ${victim.pid}
         and not exists (select 1 from flow_e2e e where e.run = b.run and e.step = 'end')`;
    await waitForRunsToEnd(db().sql, prefix);
    const endedAfterKill = Date.now() - killedAt;

    const rows = await db().sql<{ run: string; tenant: string; step: string; pid: number; at: number }[]>`
      select run, tenant, step, pid, (extract(epoch from at) * 1e6)::float8 as at from flow_e2e where run like ${prefix + '%'}`;
    // Each tx step committed once per run: nothing ran twice.
    const counts = new Map<string, number>();
    for (const row of rows) counts.set(`${row.run}/${row.step}`, (counts.get(`${row.run}/${row.step}`) ?? 0) + 1);
    expect(counts.size).toBe(300);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    // The killed worker's unfinished runs were continued by other processes.
    const continued = rows.filter((row) => row.step === 'end' && orphans.some((o) => o.run === row.run));
    expect(continued.length).toBe(orphans.length);
    expect(continued.every((row) => row.pid !== victim.pid)).toBe(true);
    // Limits held at every instant, through the takeover (a taken-over run keeps its slot).
    const intervals = [...new Set(rows.map((row) => row.run))].map((run) => {
      const begin = rows.find((row) => row.run === run && row.step === 'begin')!;
      const end = rows.find((row) => row.run === run && row.step === 'end')!;
      return { run, tenant: begin.tenant, start: begin.at, end: end.at };
    });
    const overlap = maxOverlap(intervals);
    const resumedAfterMs = Math.max(...continued.map((row) => (row.at - killedUs) / 1000));
    console.log(
      `flow crash: ${orphans.length} runs of the killed worker continued elsewhere, the last ${resumedAfterMs.toFixed(0)} ms after the kill; all 150 ended ${endedAfterKill} ms after the kill ` +
        `(lease ${LEASE_MS} ms); at most ${overlap.overall} at once, ${overlap.perTenant} per tenant`,
    );
    expect(overlap.overall).toBeLessThanOrEqual(5);
    expect(overlap.perTenant).toBeLessThanOrEqual(2);
    const [done] = await db().sql<{ n: number }[]>`
      select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '%'} and status = 'completed'`;
    expect(done!.n).toBe(150);
    expect(await slotsHeld(db().sql, 'e2e-tenants')).toEqual({ held: 0, entries: 0 });
    for (const worker of workers) if (worker !== victim) worker.kill();
  });
});
