/**
 * A caller's claim that answers after its engine began to shut down: the
 * engine executes nothing more. engine.run's claim, still uncommitted, is
 * undone — the call fails with shutting_down and nothing of it is written;
 * engine.start's, committed, gives its lease up at once, and another
 * process's sweep runs it, once.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { onFaultPoint } from '../../src/faults/fault-points.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { enginesShutAfterEach } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const engineFor = enginesShutAfterEach(db);

const executions = new Map<string, number>();
const counted = defineWorkflow({
  name: 'shutdown-claims',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { only: step('only.v1') },
  async run({ input, steps }) {
    await steps.only.call(async () => {
      executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
    });
    return { id: input.id };
  },
});

/** Starts a `counted` child and waits for it: the child's start commits with the parent's step. */
const parent = defineWorkflow({
  name: 'shutdown-claims-parent',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { kid: step('kid.v1') },
  async run({ input, steps }) {
    return steps.kid.child(counted, { id: `${input.id}-child` });
  },
});

const row = async (key: string) =>
  (await db().sql<{ status: string; expired: boolean }[]>`
    select status, locked_until <= now() as expired from stepkey.ledger where scope = 's' and key = ${key}`)[0];

/**
 * An engine on a pool of one connection, held by the test while `call` is made: the call waits for
 * it before its claim, the engine begins to shut down meanwhile, and the connection is then let go.
 */
async function claimAfterShutdown<T>(call: (e: ReturnType<typeof engineFor>) => Promise<T>): Promise<PromiseSettledResult<T>> {
  const pool = connect(db().url, { max: 1 });
  try {
    const e = engineFor([counted], { database: pool, sweepIntervalMs: 3_600_000 });
    const held = await pool.sql.reserve();
    const called = call(e);
    called.catch(() => {});
    // The shutdown begins while the claim waits; it resolves once the claim has answered (and given
    // up any lease it took).
    const stopped = e.shutdown({ timeoutMs: PATIENCE_MS });
    held.release();
    await stopped;
    const [settled] = await Promise.allSettled([called]);
    return settled!;
  } finally {
    // Once the undone claim's ROLLBACK is answered and its connection back in the pool (postgres.js
    // waits out the close's timeout for a connection still reserved).
    await pool.sql`select 1`.catch(() => {});
    await pool.close();
  }
}

describe('a claim that answers after the shutdown began', () => {
  it('engine.run: undone, the call refused with shutting_down; nothing written, nothing executed', async () => {
    const key = uniqueKey('shutdown-run');
    const settled = await claimAfterShutdown((e) => e.run(counted, { scope: 's', key }, { id: key }));
    expect(settled.status).toBe('rejected');
    expect((settled as PromiseRejectedResult).reason).toMatchObject({ code: 'shutting_down' });
    expect(executions.get(key) ?? 0).toBe(0);
    expect(await row(key)).toBeUndefined();
    // The same call to a process that is up runs it, once.
    expect(await engineFor([counted]).run(counted, { scope: 's', key }, { id: key })).toEqual({ id: key });
    expect(executions.get(key)).toBe(1);
  });

  it('a child run whose start commits with its parent’s step as the shutdown begins: its lease given up at once; another process’s sweep runs it, once', async () => {
    const key = uniqueKey('shutdown-parent');
    const e = engineFor([parent, counted], { sweepIntervalMs: 3_600_000 });
    let stopped: Promise<void> | undefined;
    // Just after the child's start committed, before its parent's process executes it.
    const disarm = onFaultPoint('engine.after-child-start', counted.name, () => {
      stopped = e.shutdown({ timeoutMs: PATIENCE_MS });
    });
    try {
      await e.start(parent, { scope: 's', key }, { id: key });
      await expect.poll(() => stopped !== undefined, { timeout: PATIENCE_MS }).toBe(true);
      await stopped;
    } finally {
      disarm();
    }
    const [child] = await db().sql<{ key: string; status: string; expired: boolean }[]>`
      select key, status, locked_until <= now() as expired from stepkey.ledger where scope = 's' and parent_run = ${key}`;
    expect(child).toMatchObject({ status: 'in_progress', expired: true });
    expect(executions.get(`${key}-child`) ?? 0).toBe(0);
    // Another process's sweep runs the child, once, and its end wakes the parent.
    engineFor([parent, counted]).startSweeper();
    await expect.poll(async () => (await row(key))?.status, { timeout: PATIENCE_MS }).toBe('completed');
    expect(executions.get(`${key}-child`)).toBe(1);
  });

  it('engine.start: committed, its lease given up at once; another process’s sweep runs it, once', async () => {
    const key = uniqueKey('shutdown-start');
    const settled = await claimAfterShutdown((e) => e.start(counted, { scope: 's', key }, { id: key }));
    expect(settled.status).toBe('fulfilled');
    expect(await row(key)).toEqual({ status: 'in_progress', expired: true });
    expect(executions.get(key) ?? 0).toBe(0);
    engineFor([counted]).startSweeper();
    await expect.poll(async () => (await row(key))?.status, { timeout: PATIENCE_MS }).toBe('completed');
    expect(executions.get(key)).toBe(1);
  });
});
