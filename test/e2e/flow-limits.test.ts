/**
 * Step limits across three worker processes: a rate limit of 50 per second
 * holds in every one-second window (plus the bucket's burst of 50), a limit
 * of 3 at once holds at every instant, and a worker SIGKILLed while its step
 * holds a slot gives it back — through the takeover of its run, which keeps
 * the slot — within about a lease; every run completes once; no slot is
 * left held.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { createIntervals, maxOverlap, readIntervals, waitForRunsToEnd } from '../helpers/flow.js';
import { limitHeld } from '../helpers/limits.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/limit-workers.ts', import.meta.url));
const LEASE_MS = 1_000;
const env = { STEPKEY_LEASE_MS: String(LEASE_MS), STEPKEY_SWEEP_INTERVAL_MS: '100' };
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table limit_e2e (run text not null, pid int not null, at timestamptz not null)`;
  await createIntervals(db().sql);
});
afterAll(() => {
  for (const child of children) child.kill();
});

function workers(kind: string, prefix: string, perWorker: number, perSecond: number): ChildHandle[] {
  return [0, 1, 2].map((i) => {
    const child = spawnScript(script, {
      args: ['work', db().url, kind, prefix, String(i * perWorker), String((i + 1) * perWorker), String(perSecond)],
      env,
    });
    children.push(child);
    return child;
  });
}

async function completed(prefix: string): Promise<number> {
  const [row] = await db().sql<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '-%'} and status = 'completed'`;
  return row!.n;
}

async function startsOnce(prefix: string): Promise<{ runs: number; once: boolean; times: number[]; pids: Map<string, number> }> {
  const rows = await db().sql<{ run: string; pid: number; at: number }[]>`
    select run, pid, (extract(epoch from at) * 1000)::float8 as at from limit_e2e where run like ${prefix + '-%'} order by at`;
  const counts = new Map<string, number>();
  for (const row of rows) counts.set(row.run, (counts.get(row.run) ?? 0) + 1);
  return {
    runs: counts.size,
    once: [...counts.values()].every((n) => n === 1),
    times: rows.map((row) => row.at),
    pids: new Map(rows.map((row) => [row.run, row.pid])),
  };
}

describe('step limits across three processes', () => {
  it('a rate limit of 50/s: at most 50 + the burst of 50 starts in any one-second window; every run once', async () => {
    const prefix = uniqueKey('rate');
    // 3 × 25 runs a second offered for 6 s against 50 allowed: the bucket's burst, then runs wait.
    const perWorker = 150;
    const started = Date.now();
    const procs = workers('rate', prefix, perWorker, 25);
    await Promise.all(procs.map((child) => child.waitFor(/STARTED/, PATIENCE_MS)));
    await waitForRunsToEnd(db().sql, `${prefix}-`);
    const tookMs = Date.now() - started;
    for (const child of procs) child.kill();
    const { runs, once, times } = await startsOnce(prefix);
    expect(runs).toBe(3 * perWorker);
    expect(once).toBe(true);
    expect(await completed(prefix)).toBe(3 * perWorker);
    // The steps record the time of their grants: the grants of any one-second window are counted
    // against the bound, however late a busy host ran each step after its grant.
    const WINDOW_MS = 1_000;
    let most = 0;
    let mostAfterFirst = 0;
    for (let i = 0, j = 0; i < times.length; i += 1) {
      while (j < times.length && times[j]! < times[i]! + WINDOW_MS) j += 1;
      most = Math.max(most, j - i);
      if (times[i]! >= times[0]! + 1_000) mostAfterFirst = Math.max(mostAfterFirst, j - i);
    }
    console.log(
      `limit rate: ${runs} runs in ${tookMs} ms; at most ${most} grants in a 1 s window (${mostAfterFirst} once the first second has passed); ` +
        `span ${((times.at(-1)! - times[0]!) / 1000).toFixed(1)} s`,
    );
    expect(most).toBeLessThanOrEqual(50 + 50);
  });

  it('a limit of 3 at once holds at every instant; no slot is left held', async () => {
    const prefix = uniqueKey('conc');
    const procs = workers('conc', prefix, 40, 40);
    await Promise.all(procs.map((child) => child.waitFor(/STARTED/, PATIENCE_MS)));
    await waitForRunsToEnd(db().sql, `${prefix}-`);
    for (const child of procs) child.kill();
    const intervals = await readIntervals(db().sql, `${prefix}-`);
    const overlap = maxOverlap(intervals);
    console.log(`limit concurrency: ${intervals.length} calls, at most ${overlap.overall} at once`);
    expect(new Set(intervals.map((i) => i.run)).size).toBe(120);
    expect(intervals.every((i) => Number.isFinite(i.end))).toBe(true);
    expect(overlap.overall).toBeLessThanOrEqual(3);
    expect(overlap.overall).toBeGreaterThan(1);
    expect(await completed(prefix)).toBe(120);
    expect(await limitHeld(db().sql, 'e2e-conc')).toMatchObject({ held: 0, slots: 0 });
  });

  it('a worker SIGKILLed inside a limited step: its run keeps the slot, is taken over within about a lease and commits once; no slot is left', async () => {
    const prefix = uniqueKey('crash');
    const procs = workers('crash', prefix, 10, 20);
    const match = await Promise.race(procs.map((child) => child.waitFor(/HOLD (\S+)/, PATIENCE_MS).then((m) => ({ child, key: m[1]! }))));
    match.child.kill('SIGKILL');
    const killedAt = Date.now();
    await match.child.exited;
    // The killed step's transaction rolled back; its run still holds its slot (no second holder gets it) until taken over.
    await expect.poll(async () => (await limitHeld(db().sql, 'e2e-crash')).slots).toBeLessThanOrEqual(2);
    let victimDoneMs = 0;
    await expect
      .poll(
        async () => {
          const [row] = await db().sql<{ n: number }[]>`select count(*)::int as n from limit_e2e where run = ${match.key}`;
          if (row!.n > 0 && victimDoneMs === 0) victimDoneMs = Date.now() - killedAt;
          return row!.n;
        },
        { interval: 20 },
      )
      .toBe(1);
    await Promise.all(procs.filter((child) => child !== match.child).map((child) => child.waitFor(/STARTED/, PATIENCE_MS)));
    // Runs the killed worker had started and not finished are taken over by the others.
    await waitForRunsToEnd(db().sql, `${prefix}-`);
    for (const child of procs) if (child !== match.child) child.kill();
    const { once, pids } = await startsOnce(prefix);
    console.log(`limit crash: the killed holder's step committed ${victimDoneMs} ms after the kill (lease ${LEASE_MS} ms)`);
    expect(once).toBe(true);
    expect(pids.get(match.key)).not.toBe(match.child.pid);
    expect(await limitHeld(db().sql, 'e2e-crash')).toMatchObject({ held: 0, slots: 0 });
    // Every run whose key the killed worker started and committed its claim completed.
    const [open] = await db().sql<{ n: number }[]>`
      select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '-%'} and status <> 'completed'`;
    expect(open!.n).toBe(0);
  });
});
