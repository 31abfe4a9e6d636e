/**
 * A run's tree after its process is SIGKILLed right after a child's start
 * committed (the fault point engine.after-child-start): cancelling the parent
 * from another process cancels the child it had just started, and a parent
 * whose deadline passes meanwhile is ended by any sweeper with its child —
 * and nothing of either runs afterwards, in any process. A child that went in
 * line on a queue is dispatched by another process's sweeper, once, and its
 * parent completes.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnScript, type ChildHandle } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { order, parcel } from '../helpers/scripts/wait-workflows.js';
import { slotsHeld } from '../helpers/flow.js';

const db = useTestDatabase();
const script = fileURLToPath(new URL('../helpers/scripts/wait-workflows.ts', import.meta.url));
const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200' };
const children: ChildHandle[] = [];

beforeAll(async () => {
  await db().sql`create table wait_effects (run_key text not null, step text not null, at timestamptz not null, pid int not null)`;
});
afterAll(() => {
  for (const child of children) child.kill();
});

function spawn(args: string[], options: { faults?: string; clockOffsetMs?: number; deadlineMs?: number } = {}): ChildHandle {
  const child = spawnScript(script, {
    args: [args[0]!, db().url, ...args.slice(1)],
    env: {
      ...env,
      WAIT_CLOCK_OFFSET_MS: String(options.clockOffsetMs ?? 0),
      ...(options.deadlineMs ? { WAIT_DEADLINE_MS: String(options.deadlineMs) } : {}),
    },
    ...(options.faults ? { faults: options.faults } : {}),
  });
  children.push(child);
  return child;
}

const tree = async (scope: string, key: string) =>
  db().sql<{ key: string; status: string; root_key: string }[]>`
    select key, status, root_key from stepkey.ledger where scope = ${scope} and (key = ${key} or parent_run = ${key})
     order by parent_run nulls first`;
const effects = async (roots: string[]) =>
  (await db().sql<{ n: number }[]>`select count(*)::int as n from wait_effects where run_key = any(${roots}::text[])`)[0]!.n;

describe('a parent killed right after its child started', () => {
  it('is cancelled with the child from another process, and neither runs again', async () => {
    const scope = 'orders';
    const key = uniqueKey('tree-cancel');
    const killed = spawn(['order', scope, key], { faults: 'engine.after-child-start:crash-parcel' });
    expect((await killed.exited).signal).toBe('SIGKILL');
    const started = await tree(scope, key);
    expect(started.map((row) => row.status)).toEqual(['waiting', 'in_progress']);
    const engine = testEngine(db(), [order, parcel]);
    try {
      expect(await engine.cancel({ scope, key }, 'order withdrawn')).toBe(true);
    } finally {
      await engine.shutdown();
    }
    // A sweeper that would take any run still open finds nothing of them.
    const fresh = spawn(['sweep', scope], { clockOffsetMs: 60_000 });
    await fresh.waitFor(/SWEEPER READY/, PATIENCE_MS);
    const ended = await tree(scope, key);
    expect(ended.map((row) => row.status)).toEqual(['cancelled', 'cancelled']);
    expect(await effects(ended.map((row) => row.root_key))).toBe(0);
    fresh.kill();
  });

  it('past its deadline is ended by a sweeper with the child cancelled, and neither runs again', async () => {
    const scope = 'orders';
    const key = uniqueKey('tree-deadline');
    const killed = spawn(['order', scope, key], { faults: 'engine.after-child-start:crash-parcel', deadlineMs: 60_000 });
    expect((await killed.exited).signal).toBe('SIGKILL');
    const fresh = spawn(['sweep', scope], { clockOffsetMs: 120_000 });
    await fresh.waitFor(/SWEEPER READY/, PATIENCE_MS);
    await expect.poll(async () => (await tree(scope, key)).map((row) => row.status), { timeout: PATIENCE_MS }).toEqual(['deadline_exceeded', 'cancelled']);
    expect(await effects((await tree(scope, key)).map((row) => row.root_key))).toBe(0);
    fresh.kill();
  });

  it('whose child went in line on a queue: another process’s sweeper dispatches the child once, and the parent completes', async () => {
    const scope = 'orders';
    const key = uniqueKey('tree-queued');
    const killed = spawn(['queued-order', scope, key], { faults: 'engine.after-child-start:crash-parcel' });
    expect((await killed.exited).signal).toBe('SIGKILL');
    const queued = await db().sql<{ status: string; wait_kind: string | null }[]>`
      select status, wait_kind from stepkey.ledger where scope = ${scope} and (key = ${key} or parent_run = ${key}) order by parent_run nulls first`;
    // Both parked: the parent on its child, the child for a slot — no lease, nothing to take over.
    expect(queued).toEqual([
      { status: 'waiting', wait_kind: 'child' },
      { status: 'waiting', wait_kind: 'slot' },
    ]);
    expect(await slotsHeld(db().sql, 'crash-parcels')).toEqual({ held: 0, entries: 1 });
    const fresh = spawn(['sweep', scope]);
    await fresh.waitFor(/SWEEPER READY/, PATIENCE_MS);
    await expect.poll(async () => (await tree(scope, key)).map((row) => row.status), { timeout: PATIENCE_MS }).toEqual(['completed', 'completed']);
    const ran = await db().sql<{ step: string; n: number }[]>`
      select step, count(*)::int as n from wait_effects where run_key = any(${(await tree(scope, key)).map((row) => row.root_key)}::text[])
       group by step order by step`;
    expect(ran).toEqual([
      { step: 'confirm.v1', n: 1 },
      { step: 'pack.v1', n: 1 },
    ]);
    expect(await slotsHeld(db().sql, 'crash-parcels')).toEqual({ held: 0, entries: 0 });
    fresh.kill();
  });
});
