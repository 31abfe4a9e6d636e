/**
 * Workflows: a 3-step workflow whose steps are tx steps writing one row each,
 * against the ceiling — the same work as N+1 bare transactions through
 * postgres.js (the ceiling's SQL, frozen), in the same process, the two
 * measured in turns, each repetition on a fresh database. Per operation:
 * statements, commits, WAL and Node CPU (cost.ts), for a run, a replay and
 * call steps. And a call step to a local
 * no-op callee, alone and after a tx step: what the effect record (an
 * attempt's start before the call, its end after) costs a call. Then what the
 * runs listing's indexes cost each run: the same workflow with and without
 * them, and the bytes each index grows by per run.
 */
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { Clock } from '../../src/db/clock.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine } from '../../src/engine/engine.js';
import type { Database, Sql } from '../../src/db/connect.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { benchDatabase, measure, medianOf, printTable, type BenchDatabase, type Measurement } from './harness.js';
import { costCells, costHeader, costPerOperation } from './cost.js';

/** The indexes the runs listing reads (migration 0005_operator_view), as that migration creates them. */
const listingIndexes = {
  ledger_runs_created_idx: `create index ledger_runs_created_idx on stepkey.ledger (created_at, scope, key) where kind = 'run'`,
  ledger_runs_workflow_idx: `create index ledger_runs_workflow_idx on stepkey.ledger (name, version, created_at, scope, key) where kind = 'run'`,
  ledger_runs_unsuccessful_idx:
    `create index ledger_runs_unsuccessful_idx on stepkey.ledger (created_at, scope, key) where kind = 'run' and ` +
    `(status = 'failed' or status = 'cancelled' or (status = 'completed' and not outcome_ok))`,
};

/** Runs with the listing's indexes and without them (same process, same database), and their bytes per run. */
async function indexCost(
  sql: Sql,
  options: { ops: number; runs: number },
  runs: (label: string, concurrency: number) => Promise<Measurement>,
): Promise<void> {
  const rows: (string | number)[][] = [];
  const sizes = async () =>
    sql<{ name: string; bytes: number }[]>`
      select c.relname as name, pg_relation_size(c.oid)::float8 as bytes from pg_class c
       where c.relname in ${sql(Object.keys(listingIndexes))}`;
  for (const concurrency of [1, 8]) {
    // With and without, taken in turns, so that a busy machine weighs on both alike.
    const withIndexes: Measurement[] = [];
    const without: Measurement[] = [];
    let grown = 0;
    for (let round = 0; round < options.runs; round += 1) {
      const before = await sizes();
      withIndexes.push(await runs('with', concurrency));
      const after = await sizes();
      grown += after.reduce((sum, index) => sum + index.bytes - (before.find((b) => b.name === index.name)?.bytes ?? 0), 0);
      for (const name of Object.keys(listingIndexes)) await sql.unsafe(`drop index stepkey.${name}`);
      without.push(await runs('without', concurrency));
      for (const statement of Object.values(listingIndexes)) await sql.unsafe(statement);
    }
    const median = (all: Measurement[]) => [...all].sort((a, b) => a.opsPerSecond - b.opsPerSecond)[Math.floor(all.length / 2)]!;
    const on = median(withIndexes);
    const off = median(without);
    rows.push([`without the listing's indexes, c=${concurrency}`, off.opsPerSecond, off.p50Ms, '1.00', '']);
    rows.push([`with them, c=${concurrency}`, on.opsPerSecond, on.p50Ms, (on.opsPerSecond / off.opsPerSecond).toFixed(2), Math.round(grown / (options.ops * options.runs))]);
  }
  printTable(
    `The runs listing's indexes, per run (3-step workflow, ${options.ops} runs per measurement, median of ${options.runs})`,
    ['operation', 'runs/s', 'p50 ms', 'vs without', 'index bytes/run'],
    rows,
  );
}

/** The 3-step workflow: three tx steps, one business row each (workflow-parts.bench.ts takes it apart). */
export const threeSteps = defineWorkflow({
  name: 'bench-three',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { a: step('a.v1'), b: step('b.v1'), c: step('c.v1') },
  async run({ input, steps }) {
    for (const handle of [steps.a, steps.b, steps.c]) {
      await handle.tx(async (_db, { sql }) => {
        await sql`insert into bench_rows (n) values (${input.n})`;
      });
    }
    return input.n;
  },
});

const noop = async () => ({ ok: true });

/** A run of one call step: its attempt's start rides the run's start, its end the step's record. */
const oneCall = defineWorkflow({
  name: 'bench-call',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { call: step('call.v1') },
  async run({ steps }) {
    return steps.call.call(noop);
  },
});

/** Two call steps: the second attempt's start has nothing to ride and commits alone. */
const twoCalls = defineWorkflow({
  name: 'bench-two-calls',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { first: step('first.v1'), second: step('second.v1') },
  async run({ steps }) {
    await steps.first.call(noop);
    return steps.second.call(noop);
  },
});

/** One tx step: the work of a queued run, and the same run unqueued. */
const oneStep = defineWorkflow({
  name: 'bench-one',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { only: step('only.v1') },
  async run({ input, steps }) {
    await steps.only.tx(async (_db, { sql }) => {
      await sql`insert into bench_rows (n) values (${input.n})`;
    });
    return input.n;
  },
});

/** A run that sleeps first: it parks at once, and its wake records the sleep and ends the run. */
const napper = defineWorkflow({
  name: 'bench-nap',
  version: 1,
  input: z.object({ until: z.number() }),
  steps: { nap: step('nap.v1') },
  async run({ input, steps }) {
    await steps.nap.sleepUntil(new Date(input.until));
    return 1;
  },
});

const queue = defineQueue({ name: 'bench-queue', concurrency: 8 });
const workflows = [threeSteps, oneCall, twoCalls, oneStep, napper];
const engineOn = (db: Database, options: { clock?: Clock; maxConcurrentRuns?: number } = {}) =>
  createEngine({ database: db, workflows, queues: [queue], onError: () => {}, logger: false, ...options });

/**
 * The 3-step workflow against its ceiling, at each concurrency: the two
 * measured in turns, `repetitions` times, each repetition on a fresh
 * database; the medians and the ratio of the medians.
 */
async function againstCeiling(database: BenchDatabase, options: { ops: number; runs: number }, repetitions: number) {
  const rows: (string | number)[][] = [];
  const ceilings = new Map<number, Measurement>();
  for (const concurrency of [1, 8, 32]) {
    const ceiling: Measurement[] = [];
    const engineRuns: Measurement[] = [];
    for (let repetition = 0; repetition < repetitions; repetition += 1) {
      const fresh = await database.fresh();
      const db = connect(fresh.url, { max: 40 });
      const engine = engineOn(db);
      try {
        await db.sql`create table bench_rows (id bigserial primary key, n int not null)`;
        ceiling.push(
          await measure(options.ops, concurrency, async (i) => {
            for (let t = 0; t < 4; t += 1) await db.sql.begin((tx) => tx`insert into bench_rows (n) values (${i})`);
          }),
        );
        engineRuns.push(await measure(options.ops, concurrency, (i) => engine.run(threeSteps, { scope: 'bench', key: `w-${i}` }, { n: i })));
      } finally {
        await engine.shutdown();
        await db.close();
        await fresh.drop();
      }
    }
    const bare = medianRun(ceiling);
    const runs = medianRun(engineRuns);
    ceilings.set(concurrency, bare);
    rows.push([`4 bare transactions, c=${concurrency}`, bare.opsPerSecond, bare.p50Ms, bare.p99Ms, '1.00']);
    rows.push([`3-step workflow, c=${concurrency}`, runs.opsPerSecond, runs.p50Ms, runs.p99Ms, (runs.opsPerSecond / bare.opsPerSecond).toFixed(2)]);
  }
  printTable(
    `The 3-step workflow against its ceiling (${options.ops} runs per measurement; median of ${repetitions}, taken in turns, each on a fresh database)`,
    ['operation', 'runs/s', 'p50 ms', 'p99 ms', 'vs ceiling'],
    rows,
  );
  return ceilings;
}

function medianRun(all: Measurement[]): Measurement {
  return [...all].sort((a, b) => a.opsPerSecond - b.opsPerSecond)[Math.floor(all.length / 2)]!;
}

/** Statements, commits, WAL and CPU per operation, each path run 200 times one after another on a fresh database. */
async function perOperation(database: BenchDatabase) {
  const fresh = await database.fresh();
  const n = 200;
  try {
    const setup = connect(fresh.url, { max: 2 });
    await setup.sql`create table bench_rows (id bigserial primary key, n int not null)`;
    const finished = engineOn(setup);
    for (let i = -1; i < n; i += 1) await finished.run(threeSteps, { scope: 'bench', key: `done-${i}` }, { n: i });
    await finished.shutdown();
    await setup.close();
    const onEngine = (label: string, run: (engine: ReturnType<typeof engineOn>, i: number) => Promise<unknown>) =>
      costPerOperation(fresh.url, n, engineOn, run, (engine) => engine.shutdown()).then((cost) => [label, ...costCells(cost)]);
    const rows = [
      await costPerOperation(
        fresh.url,
        n,
        (db) => db,
        async (db, i) => {
          for (let t = 0; t < 4; t += 1) await db.sql.begin((tx) => tx`insert into bench_rows (n) values (${i})`);
        },
        async () => {},
      ).then((cost) => ['4 bare transactions (the ceiling)', ...costCells(cost)]),
      await onEngine('3-step workflow', (engine, i) => engine.run(threeSteps, { scope: 'bench', key: `cost-${i}` }, { n: i })),
      await onEngine('3-step workflow, replayed (a finished run)', (engine, i) => engine.run(threeSteps, { scope: 'bench', key: `done-${i}` }, { n: i })),
      await onEngine('1 call step (no-op callee)', (engine, i) => engine.run(oneCall, { scope: 'bench', key: `cost-1-${i}` }, { n: i })),
      await onEngine('2 call steps (no-op callee)', (engine, i) => engine.run(twoCalls, { scope: 'bench', key: `cost-2-${i}` }, { n: i })),
      await onEngine('1-step run (unqueued)', (engine, i) => engine.run(oneStep, { scope: 'bench', key: `one-${i}` }, { n: i })),
      await onEngine('1-step queued run: enqueue, dispatch, run', async (engine, i) => {
        const handle = await engine.enqueue(oneStep, { scope: 'bench', key: `queued-${i}` }, { n: i }, { queue });
        await handle.result();
        // The dispatch after its end has committed too.
        await sleep(2);
      }),
      await onEngine('sleep step: park (a run that sleeps first)', (engine, i) =>
        engine.attempt(napper, { scope: 'bench', key: `nap-${i}` }, { until: Date.now() + 3_600_000 }),
      ),
      // Every run parked above is due an hour later: a sweep that takes one at a time wakes it, and it ends.
      await costPerOperation(
        fresh.url,
        n,
        (db) => {
          const clock = new Clock();
          clock.advance(2 * 3_600_000);
          return engineOn(db, { clock, maxConcurrentRuns: 1 });
        },
        async (engine) => {
          await engine.sweep();
          while (engine.activeRuns > 0) await sleep(1);
        },
        (engine) => engine.shutdown(),
      ).then((cost) => ['sleep step: wake (sweep, load, record, end)', ...costCells(cost)]),
    ];
    printTable(`Per operation (${n} one after another, a fresh database; WAL flushes ≥ commits that write)`, ['operation', ...costHeader], rows);
  } finally {
    await fresh.drop();
  }
}

/** `npm run bench -- workflow-cost`: the per-operation table alone. */
export async function workflowCostBench(): Promise<void> {
  const database = await benchDatabase();
  try {
    await perOperation(database);
  } finally {
    await database.close();
  }
}

export async function workflowBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  try {
    const ceilings = await againstCeiling(database, options, Math.max(5, options.runs));
    await perOperation(database);
    const db = connect(database.url, { max: 40 });
    const engine = engineOn(db);
    try {
      await db.sql`create table bench_rows (id bigserial primary key, n int not null)`;
      const rows: (string | number)[][] = [];
      let prefix = 0;
      for (const concurrency of [1, 8, 32]) {
        const ceiling = ceilings.get(concurrency)!;
        for (const [label, workflow] of [['1 call step (no-op callee)', oneCall], ['2 call steps (no-op callee)', twoCalls]] as const) {
          const calls = await medianOf(options.runs, () => {
            prefix += 1;
            const run = prefix;
            return measure(options.ops, concurrency, (i) => engine.run(workflow, { scope: 'bench', key: `c-${run}-${i}` }, { n: i }));
          });
          rows.push([`${label}, c=${concurrency}`, calls.opsPerSecond, calls.p50Ms, calls.p99Ms, (calls.opsPerSecond / ceiling.opsPerSecond).toFixed(2)]);
        }
      }
      printTable(
        `Call steps (${options.ops} runs per measurement, median of ${options.runs}; against the ceiling's median above)`,
        ['operation', 'runs/s', 'p50 ms', 'p99 ms', 'vs ceiling'],
        rows,
      );
      await indexCost(db.sql, options, (label, concurrency) => {
        prefix += 1;
        const run = prefix;
        return measure(options.ops, concurrency, (i) => engine.run(threeSteps, { scope: 'bench', key: `${label}-${run}-${i}` }, { n: i }));
      });
    } finally {
      await engine.shutdown();
      await db.close();
    }
  } finally {
    await database.close();
  }
}
