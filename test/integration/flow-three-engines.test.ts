/**
 * Flow control across three engines, each with its own pool (as three
 * processes would be): a queue of concurrency 5, 2 per tenant, one of
 * concurrency 5 alone, and one of a single slot (its ends hand it over by
 * swaps), hold their limits at every instant — computed from the intervals the runs' steps
 * record — and every run completes once; a tenant that enqueues 2,000 runs
 * does not starve one that enqueues 20 after it; no slot is held once every
 * run has ended.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { createTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';
import { createIntervals, maxOverlap, readIntervals, recordEnd, recordStart, slotsHeld, waitForRunsToEnd } from '../helpers/flow.js';

let drop: () => Promise<void>;
let url = '';
const pools: Database[] = [];
let main: Database;
beforeAll(async () => {
  const created = await createTestDatabase();
  drop = created.drop;
  url = created.url;
  main = connect(url, { max: 4 });
  pools.push(main);
  await createIntervals(main.sql);
});
afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.close()));
  await drop?.();
});

let gate: Promise<void> = Promise.resolve();
/** How long hundreds of runs may take to end on a busy host. */
const ALL_RUNS_MS = 600_000;

const work = defineWorkflow({
  name: 'flow-interval',
  version: 1,
  input: z.object({ id: z.string(), tenant: z.string(), pause: z.number().int() }),
  // Its call waits at the gate for as long as the test enqueues: no attempt timeout cuts it meanwhile.
  steps: { work: step('interval.v1', { timeoutMs: LONG_LEASE_MS }) },
  async run({ input, steps }) {
    await steps.work.call(async () => {
      const id = await recordStart(main.sql, input.id, input.tenant);
      await gate;
      await new Promise((resolve) => setTimeout(resolve, input.pause));
      await recordEnd(main.sql, id);
    });
    return input.id;
  },
});

const perTenant = defineQueue<{ tenant: string }>({
  name: 'flow-per-tenant',
  concurrency: 5,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 2 },
});
const fair = defineQueue<{ tenant: string }>({ name: 'flow-fair', concurrency: 5, partitionBy: (input) => input.tenant });
/** No limit per partition and no rate. */
const plain = defineQueue({ name: 'flow-plain', concurrency: 5 });
/** One slot, no limit per partition, no rate: a run's end hands its slot over by a swap, with no lock. */
const single = defineQueue({ name: 'flow-single', concurrency: 1 });

/**
 * Three engines, as three worker processes, each with its own pool and sweeper. Their leases (and
 * so their waits for a connection) are the test engine's: a busy host never lets a run go as stalled.
 */
function threeEngines(): Engine[] {
  return [0, 1, 2].map(() => {
    const pool = connect(url, { max: 6 });
    pools.push(pool);
    const engine = testEngine(Object.assign(pool, { name: 'flow' }), [work], { queues: [perTenant, fair, plain, single], maxConcurrentRuns: 4 });
    engine.startSweeper();
    return engine;
  });
}

async function enqueueAll(engines: Engine[], runs: { key: string; tenant: string; pause: number }[], queue: string, parallel = 6) {
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async (_, lane) => {
      for (let i = next++; i < runs.length; i = next++) {
        const run = runs[i]!;
        await engines[(i + lane) % engines.length]!.enqueue(
          work,
          { scope: `tenant-${run.tenant}`, key: run.key },
          { id: run.key, tenant: run.tenant, pause: run.pause },
          { queue },
        );
      }
    }),
  );
}

/**
 * 300 runs of 10 tenants across three engines on `queue`, until each has ended: the most that ran at
 * one instant (at most `concurrency` in all, and `perTenant` in a tenant if given, and, with more than
 * one slot, more than 1: the limit is reached, not kept by running one at a time), every run once and
 * completed, no slot left.
 */
async function holdsItsLimits(queue: string, perTenant?: number, concurrency = 5) {
  const engines = threeEngines();
  const prefix = uniqueKey(queue);
  const runs = Array.from({ length: 300 }, (_, i) => ({ key: `${prefix}-${i}`, tenant: `t${i % 10}`, pause: 2 + (i % 7) * 3 }));
  try {
    await enqueueAll(engines, runs, queue);
    await waitForRunsToEnd(main.sql, prefix, ALL_RUNS_MS);
  } finally {
    await Promise.all(engines.map((engine) => engine.shutdown({ timeoutMs: 5_000 })));
  }
  const intervals = await readIntervals(main.sql, prefix);
  const overlap = maxOverlap(intervals);
  console.log(`${queue}: at most ${overlap.overall} runs at once overall, ${overlap.perTenant} per tenant`);
  expect(overlap.overall).toBeLessThanOrEqual(concurrency);
  if (perTenant !== undefined) expect(overlap.perTenant).toBeLessThanOrEqual(perTenant);
  if (concurrency > 1) expect(overlap.overall).toBeGreaterThan(1);
  // Every run's step ran (a call step runs again only if its run was taken over from a stalled
  // process: counted, not forbidden — the crash test checks exactly-once tx steps), and every run completed.
  console.log(`${queue}: ${intervals.length - 300} call executions repeated after a takeover`);
  expect(new Set(intervals.map((i) => i.run)).size).toBe(300);
  const [done] = await main.sql<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '%'} and status = 'completed' and outcome_ok`;
  expect(done!.n).toBe(300);
  expect(await slotsHeld(main.sql, queue)).toEqual({ held: 0, entries: 0 });
}

describe('three engines', () => {
  it('concurrency 5, 2 per tenant, 10 tenants × 30 runs: never more at one instant; each run once; no slot left', async () => {
    await holdsItsLimits('flow-per-tenant', 2);
  }, 1_200_000);

  it('concurrency 5, no partition limit: never more at one instant; each run once; no slot left', async () => {
    await holdsItsLimits('flow-plain');
  }, 1_200_000);

  it('one slot (ends hand it over by swaps): never two at one instant; each run once; no slot left', async () => {
    await holdsItsLimits('flow-single', undefined, 1);
  }, 1_200_000);

  it('tenant A enqueues 2,000, then tenant B 20: every B run starts before A’s 200th', async () => {
    // Runs wait at the gate while A's backlog is enqueued: the lease outlasts that wait.
    const engines = threeEngines();
    const prefix = uniqueKey('fair');
    let open!: () => void;
    gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const t0 = Date.now();
      await enqueueAll(engines, Array.from({ length: 2000 }, (_, i) => ({ key: `${prefix}-a${i}`, tenant: 'A', pause: 0 })), 'flow-fair');
      console.log(`flow fairness: 2,000 enqueues took ${Date.now() - t0} ms`);
      await enqueueAll(engines, Array.from({ length: 20 }, (_, i) => ({ key: `${prefix}-b${i}`, tenant: 'B', pause: 0 })), 'flow-fair');
      open();
      const t1 = Date.now();
      await waitForRunsToEnd(main.sql, `${prefix}-b`, ALL_RUNS_MS);
      console.log(`flow fairness: B's 20 runs ended ${Date.now() - t1} ms after the gate opened`);
    } finally {
      const t2 = Date.now();
      open();
      // A's backlog is not needed past B: cancel what is still queued, then stop.
      await main.sql`update stepkey.ledger set status = 'cancelled', outcome = '"stop"', outcome_ok = false, wait_kind = null,
                        wait_step = null, wait_for = null, wake_at = null
                      where key like ${prefix + '-a%'} and status = 'waiting'`;
      await Promise.all(engines.map((engine) => engine.shutdown({ timeoutMs: 10_000 })));
      gate = Promise.resolve();
      console.log(`flow fairness: stopping took ${Date.now() - t2} ms`);
    }
    const starts = await readIntervals(main.sql, prefix);
    const bStarts = starts.filter((s) => s.tenant === 'B');
    const lastB = starts.indexOf(bStarts[bStarts.length - 1]!);
    const aBeforeLastB = starts.slice(0, lastB).filter((s) => s.tenant === 'A').length;
    console.log(`flow fairness: B's last run was start #${lastB + 1}, after ${aBeforeLastB} of A's runs had started`);
    // Each B run started once, and all of them before A's 200th.
    expect(bStarts.length).toBe(20);
    expect(new Set(bStarts.map((s) => s.run)).size).toBe(20);
    expect(aBeforeLastB).toBeLessThan(200);
  }, 1_200_000);
});
