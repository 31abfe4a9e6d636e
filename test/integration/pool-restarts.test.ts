/**
 * A process that sends keyed events to runs waiting on them — and executes the
 * runs its sends wake — while its Postgres restarts (fast and immediate
 * shutdowns, on a throwaway cluster of this file's own). After each restart,
 * once the sends in flight have settled, the pool holds no reservation of a
 * transaction marked dead, never handed one connection to two transactions,
 * and has no connection slot whose attempts go out mute (a write batch left
 * stale by a close, which kept a slot from reconnecting for minutes); every
 * send is answered eventually and every event received by its wait.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { poolHealth } from '../../src/db/pool-health.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { Engine } from '../../src/engine/engine.js';
import { startCluster, type ChaosCluster } from '../chaos/cluster.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const RUNS = Number(process.env.T_RUNS ?? 40);
const SENDS_PER_RUN = Number(process.env.T_SENDS ?? 10);
const RESTARTS = Number(process.env.T_RESTARTS ?? 6);

const waiter = defineWorkflow({
  name: 'restart-waiter',
  version: 1,
  input: z.object({}),
  events: { go: z.object({ n: z.number() }) },
  steps: { wait: step('wait.v1'), done: step('done.v1') },
  async run({ steps }) {
    const got: number[] = [];
    for (let i = 0; i < SENDS_PER_RUN; i += 1) {
      const event = await steps.wait.waitForEvent('go', { id: String(i) });
      got.push(event.payload.n);
    }
    await steps.done.tx(async () => {});
    return got.length;
  },
});

const projectRoot = fileURLToPath(new URL('../..', import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let dir: string;
let cluster: ChaosCluster;
let database: Database;
let engine: Engine;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepkey-pool-restarts-'));
  chmodSync(dir, 0o755);
  cluster = await startCluster(join(dir, 'pg'), projectRoot, Date.now());
  await migrate(cluster.url);
  database = connect(cluster.url, { max: 8 });
  engine = new Engine({ database, workflows: [waiter], onError: () => {}, logger: false });
  // As in any process that runs waiting workflows: a send's prompt wake that fails is the sweep's.
  engine.startSweeper();
}, PATIENCE_MS);

afterAll(async () => {
  await engine?.close({ timeoutMs: 5_000 });
  await database?.close();
  await cluster?.owner.stop(60_000, 'stdin');
  rmSync(dir, { recursive: true, force: true });
}, PATIENCE_MS);

describe('a pool whose Postgres restarts under sends that wake runs in its own process', () => {
  it('recovers every connection: each send answered, each event received, no dead or shared reservation, no mute slot', async () => {
    const refs = Array.from({ length: RUNS }, (_, i) => ({ scope: 'acme', key: `waiter-${i}` }));
    for (const ref of refs) await engine.start(waiter, ref, {});

    const answered = new Set<string>();
    const refusals = new Map<string, number>();
    // One sender per run: each sends its run's events in order, retrying each until it is answered.
    const senders = refs.map(async (ref, r) => {
      for (let n = 0; n < SENDS_PER_RUN; n += 1) {
        const key = `send-${r}-${n}`;
        for (;;) {
          try {
            await engine.send(ref as never, 'go' as never, { n } as never, { key });
            answered.add(key);
            break;
          } catch (error) {
            const code = (error as { code?: string }).code ?? String(error);
            refusals.set(code, (refusals.get(code) ?? 0) + 1);
            await sleep(50 + Math.random() * 100);
          }
        }
        // Spread the sends over the restarts.
        await sleep(Number(process.env.T_GAP ?? 200) * (0.5 + Math.random()));
      }
    });

    for (let restart = 0; restart < RESTARTS; restart += 1) {
      await sleep(1_500);
      await cluster.restart(restart % 2 === 0 ? 'fast' : 'immediate', 300 + restart * 200);
      // Once the sends in flight have settled (some sends answered after the restart), no dead
      // reservation is held.
      const before = answered.size;
      await expect.poll(() => answered.size > before || answered.size === RUNS * SENDS_PER_RUN, { timeout: PATIENCE_MS }).toBe(true);
      expect(poolHealth(database.sql).deadReservations).toBe(0);
    }
    await Promise.race([
      Promise.all(senders),
      sleep(PATIENCE_MS).then(() => {
        throw new Error(`only ${answered.size} of ${RUNS * SENDS_PER_RUN} sends answered; refused: ${JSON.stringify([...refusals])}`);
      }),
    ]);
    expect(answered.size).toBe(RUNS * SENDS_PER_RUN);

    // Every event is received by its wait: each run ends having received all of its events.
    const check = connect(cluster.url, { max: 1 });
    try {
      await expect
        .poll(
          async () =>
            (await check.sql<{ done: number }[]>`
              select count(*)::int as done from stepkey.ledger where kind = 'run' and status = 'completed'`)[0]!.done,
          { timeout: PATIENCE_MS, interval: 500 },
        )
        .toBe(RUNS);
      const [mail] = await check.sql<{ consumed: number; total: number }[]>`
        select count(*) filter (where consumed_by is not null)::int as consumed, count(*)::int as total from stepkey.mailbox`;
      expect(mail).toEqual({ consumed: RUNS * SENDS_PER_RUN, total: RUNS * SENDS_PER_RUN });
    } finally {
      await check.close();
    }
    const health = poolHealth(database.sql);
    expect(health, JSON.stringify(health)).toMatchObject({ deadReservations: 0, sharedConnections: 0, muteConnects: 0 });
  });
});
