/**
 * Step limits: what a limited step costs over an unlimited one — the p50 of
 * a one-step run (c=1, so the figure is latency, not queueing) whose step
 * takes a token from a rate limit that never runs out, or a concurrency slot
 * that is always free — and what a held slot costs the database per run
 * (statements, commits, WAL; see cost.ts). `npm run bench -- limits` (also
 * part of `npm run bench -- flow`). Default durability.
 */
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine } from '../../src/engine/engine.js';
import type { Database } from '../../src/db/connect.js';
import { costCells, costHeader, costPerOperation } from './cost.js';
import { benchDatabase, measure, medianOf, printTable } from './harness.js';

const rate = defineLimit({ name: 'bench-rate', rateLimit: { limit: 1_000_000, periodMs: 1_000 } });
const slots = defineLimit({ name: 'bench-slots', concurrency: 1_000 });

const oneStep = (name: string, limit?: typeof rate) =>
  defineWorkflow({
    name,
    version: 1,
    input: z.object({ n: z.number() }),
    steps: { tx: step(`${name}-tx.v1`, limit ? { limit } : {}), call: step(`${name}-call.v1`, limit ? { limit } : {}) },
    async run({ input, steps }) {
      if (input.n % 2 === 0) {
        await steps.tx.tx(async (_db, { sql }) => {
          await sql`insert into bench_limits (n) values (${input.n})`;
        });
      } else {
        await steps.call.call(async () => input.n);
      }
    },
  });

const plain = oneStep('bench-lim-plain');
const rated = oneStep('bench-lim-rate', rate);
const slotted = oneStep('bench-lim-slot', slots);
const workflows = [plain, rated, slotted];

const engineOn = (db: Database) =>
  createEngine({ database: db, workflows, limits: [rate, slots], onError: () => {}, logger: false, maxConcurrentRuns: 8 });

export async function limitsBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const pool = connect(database.url, { max: 10 });
  const engine = engineOn(pool);
  try {
    await pool.sql`create table bench_limits (id bigserial primary key, n int not null)`;
    const ops = Math.min(options.ops, 1_000);
    let round = 0;
    // Even n: a tx step; odd n: a call step. Separate rows for each kind.
    const latency = async (workflow: typeof plain, kind: 0 | 1) =>
      medianOf(options.runs, () => {
        round += 1;
        const r = round;
        return measure(ops, 1, (i) => engine.run(workflow, { scope: 'bench', key: `${workflow.name}-${r}-${i}` }, { n: i * 2 + kind }));
      });
    const rows: (string | number)[][] = [];
    const over = (limited: number, base: number) => `${limited >= base ? '+' : '−'}${Math.abs(limited - base).toFixed(2)} ms (${(limited / base).toFixed(2)}×)`;
    for (const [kind, label] of [[0, 'tx'], [1, 'call']] as const) {
      const base = await latency(plain, kind);
      const withRate = await latency(rated, kind);
      const withSlot = await latency(slotted, kind);
      rows.push(
        [`1 ${label} step, unlimited`, base.p50Ms, base.p99Ms, '—'],
        [`1 ${label} step, rate-limited (a token free)`, withRate.p50Ms, withRate.p99Ms, over(withRate.p50Ms, base.p50Ms)],
        [`1 ${label} step, a concurrency slot (free)`, withSlot.p50Ms, withSlot.p99Ms, over(withSlot.p50Ms, base.p50Ms)],
      );
    }
    printTable(`Limited steps: one-step runs one at a time (engine.run, c=1; ${ops} runs, median of ${options.runs})`, ['operation', 'p50 ms', 'p99 ms', 'p50 over unlimited'], rows);

    const n = 300;
    const onEngine = (label: string, workflow: typeof plain, kind: 0 | 1) =>
      costPerOperation(database.url, n, engineOn, (e, i) => e.run(workflow, { scope: 'bench', key: `cost-${workflow.name}-${kind}-${i}` }, { n: (i + 1) * 2 + kind }), (e) => e.shutdown()).then(
        (cost) => [label, ...costCells(cost)],
      );
    printTable(`What a limit costs the database, per run (${n} one-step runs, one at a time)`, ['operation', ...costHeader], [
      await onEngine('1 tx step, unlimited', plain, 0),
      await onEngine('1 tx step, rate-limited', rated, 0),
      await onEngine('1 tx step, holding a slot', slotted, 0),
      await onEngine('1 call step, unlimited', plain, 1),
      await onEngine('1 call step, rate-limited', rated, 1),
      await onEngine('1 call step, holding a slot', slotted, 1),
    ]);
  } finally {
    await engine.shutdown();
    await pool.close();
    await database.close();
  }
}
