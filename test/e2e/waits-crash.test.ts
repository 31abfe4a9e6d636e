/**
 * Runs that wait survive SIGKILL of every process: sleeping runs whose API
 * and worker processes were killed while they slept wake once, not before
 * their time, in a fresh worker (whose clock says they are due); a child run
 * is started once when its parent's process is killed right after starting
 * it, and the parent continues when the child completes in another process.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/wait-workflows.ts', import.meta.url));
const SWEEP_MS = 200;
const HOUR = 3_600_000;
const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: String(SWEEP_MS) };
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table wait_effects (run_key text not null, step text not null, at timestamptz not null, pid int not null)`;
});
afterAll(() => {
  for (const child of children) child.kill();
});

function spawn(args: string[], faults?: string, clockOffsetMs = 0): ChildHandle {
  const child = spawnScript(script, {
    args: [args[0]!, db().url, ...args.slice(1)],
    env: { ...env, WAIT_CLOCK_OFFSET_MS: String(clockOffsetMs) },
    ...(faults ? { faults } : {}),
  });
  children.push(child);
  return child;
}

describe('sleeping runs', () => {
  it('wake once and not before their time in a fresh worker after every process that knew them was killed', async () => {
    const scope = 'naps';
    const keys = Array.from({ length: 20 }, () => uniqueKey('nap'));
    // Asleep for an hour: every process that parked or swept them is killed before they are due,
    // however slow the host (the process that parks a run wakes it at its time itself, if it is
    // still alive). The fresh worker's clock is an hour and a minute ahead: for it they are due.
    const api = spawn(['start', scope, String(HOUR), ...keys]);
    await api.waitFor(/STARTED/, PATIENCE_MS);
    const worker = spawn(['sweep', scope]);
    await worker.waitFor(/SWEEPER READY/, PATIENCE_MS);
    await expect
      .poll(async () => (await db().sql`select count(*)::int as n from stepkey.ledger where scope = ${scope} and kind = 'run' and status = 'waiting'`)[0]!.n)
      .toBe(keys.length);
    api.kill('SIGKILL');
    worker.kill('SIGKILL');
    await Promise.all([api.exited, worker.exited]);
    const fresh = spawn(['sweep', scope], undefined, HOUR + 60_000);
    await fresh.waitFor(/SWEEPER READY/, PATIENCE_MS);
    await expect
      .poll(async () => (await db().sql`select count(*)::int as n from stepkey.ledger where scope = ${scope} and kind = 'run' and status = 'completed'`)[0]!.n)
      .toBe(keys.length);
    const rows = await db().sql<{ key: string; step: string; n: number; late_ms: number; pids: number[] }[]>`
      select r.key, e.step, count(*)::int as n, array_agg(e.pid) as pids,
             max(extract(epoch from (e.at - (s.outcome::json->>'until')::timestamptz)) * 1000)::float8 as late_ms
        from stepkey.ledger r
        join wait_effects e on e.run_key = r.root_key
        join stepkey.steps s on s.scope = r.scope and s.run_key = r.key and s.name = 'nap.v1'
       where r.scope = ${scope} and r.parent_key is null
       group by r.key, e.step`;
    expect(rows).toHaveLength(keys.length * 2);
    expect(rows.every((row) => row.n === 1)).toBe(true);
    const woken = rows.filter((row) => row.step === 'after.v1');
    const lateness = woken.map((row) => row.late_ms).sort((a, b) => a - b);
    // None woke before its time (by stepkey's clock: the fresh worker's); each was woken by the fresh
    // worker. How late a sweep wakes a run is measured by `npm run bench -- waits`, not asserted here.
    expect(lateness[0]!).toBeGreaterThanOrEqual(0);
    expect(woken.flatMap((row) => row.pids)).toEqual(woken.map(() => fresh.pid));
    fresh.kill();
  });
});

describe('a child run', () => {
  for (const fault of ['engine.after-child-start:crash-parcel', 'engine.after-park:ship-order.v1', 'engine.before-step:ship-order.v1']) {
    it(`is started once when its parent is killed at ${fault}, and the parent continues when it completes`, async () => {
      const scope = 'orders';
      const key = uniqueKey('order');
      const killed = spawn(['order', scope, key], fault);
      expect((await killed.exited).signal).toBe('SIGKILL');
      const fresh = spawn(['sweep', scope]);
      await fresh.waitFor(/SWEEPER READY/, PATIENCE_MS);
      if (fault === 'engine.before-step:ship-order.v1') {
        // Killed before the step: nothing of it was recorded; the retry starts the child.
        const retry = spawn(['order', scope, key]);
        await retry.waitFor(/RESULT/, PATIENCE_MS);
      }
      await expect
        .poll(async () => (await db().sql`select status from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]?.status)
        .toBe('completed');
      const [parent] = await db().sql`select root_key, outcome from stepkey.ledger where scope = ${scope} and key = ${key}`;
      const children = await db().sql`select key, root_key, status from stepkey.ledger where scope = ${scope} and parent_run = ${key}`;
      expect(children).toHaveLength(1);
      expect(children[0]!.status).toBe('completed');
      const packed = await db().sql`select count(*)::int as n from wait_effects where run_key = ${children[0]!.root_key} and step = 'pack.v1'`;
      const confirmed = await db().sql`select count(*)::int as n from wait_effects where run_key = ${parent!.root_key} and step = 'confirm.v1'`;
      expect([packed[0]!.n, confirmed[0]!.n]).toEqual([1, 1]);
      expect(JSON.parse(parent!.outcome as string)).toEqual({ parcel: `P-${key}` });
      fresh.kill();
    });
  }
});
