/**
 * Flow control: the throughput of queued one-step runs — enqueued, dispatched
 * and executed by 1 and 2 worker processes' engines (each its own pool) — as
 * a ratio to the same workflow run unqueued in the same run; the start
 * latency of a run enqueued on an empty queue (enqueue to its step) against
 * an unqueued start; and the writing commits per run a held slot costs.
 * Default durability (no synchronous_commit off).
 */
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine, type Engine } from '../../src/engine/engine.js';
import { benchDatabase, measure, medianOf, printTable, type Measurement } from './harness.js';

const started = new Map<string, number>();

const oneStep = defineWorkflow({
  name: 'bench-flow-one',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { only: step('only.v1') },
  async run({ input, steps, ctx }) {
    started.set(ctx.key, performance.now());
    await steps.only.tx(async (_db, { sql }) => {
      await sql`insert into bench_flow (n) values (${input.n})`;
    });
  },
});

const queue = defineQueue({ name: 'bench-flow', concurrency: 16 });

const engineOn = (db: Database) =>
  createEngine({ database: db, workflows: [oneStep], queues: [queue], onError: () => {}, logger: false, maxConcurrentRuns: 8 });

async function openRuns(db: Database, prefix: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '%'} and status <> 'completed'`;
  return row!.n;
}

/** `ops` runs enqueued 8 at a time across `engines`, until every one has completed. */
async function queuedThroughput(db: Database, engines: Engine[], ops: number, prefix: string): Promise<Measurement> {
  const t0 = performance.now();
  const enqueued = await measure(ops, 8, (i) =>
    engines[i % engines.length]!.enqueue(oneStep, { scope: 'bench', key: `${prefix}-${i}` }, { n: i }, { queue }),
  );
  while ((await openRuns(db, prefix)) > 0) await new Promise((resolve) => setTimeout(resolve, 5));
  return { opsPerSecond: ops / ((performance.now() - t0) / 1000), p50Ms: enqueued.p50Ms, p99Ms: enqueued.p99Ms };
}

/** From the call to the run's first line, one run at a time (the queue is empty each time). */
async function startLatency(ops: number, start: (i: number) => Promise<unknown>, keyOf: (i: number) => string): Promise<{ p50: number; p99: number }> {
  const latencies: number[] = [];
  for (let i = 0; i < ops; i += 1) {
    const t0 = performance.now();
    await start(i);
    while (!started.has(keyOf(i))) await new Promise((resolve) => setImmediate(resolve));
    latencies.push(started.get(keyOf(i))! - t0);
    // Let it end before the next one, so that the queue is empty again.
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  latencies.sort((a, b) => a - b);
  return { p50: latencies[Math.floor(latencies.length / 2)]!, p99: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))]! };
}

async function commitsPerRun(db: Database, runs: number, once: (i: number) => Promise<unknown>): Promise<number> {
  const xid = async () => Number((await db.sql<{ id: string }[]>`select pg_current_xact_id()::text as id`)[0]!.id);
  const before = await xid();
  for (let i = 0; i < runs; i += 1) await once(i);
  return (await xid()) - before - 1;
}

export async function flowBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const pools = [connect(database.url, { max: 20 }), connect(database.url, { max: 20 })];
  const [first, second] = [engineOn(pools[0]!), engineOn(pools[1]!)];
  const db = pools[0]!;
  try {
    await db.sql`create table bench_flow (id bigserial primary key, n int not null)`;
    let round = 0;
    const unqueued = await medianOf(options.runs, () => {
      round += 1;
      const run = round;
      return measure(options.ops, 8, (i) => first.run(oneStep, { scope: 'bench', key: `u-${run}-${i}` }, { n: i }));
    });
    const oneWorker = await medianOf(options.runs, () => queuedThroughput(db, [first], options.ops, `q1-${(round += 1)}`));
    const twoWorkers = await medianOf(options.runs, () => queuedThroughput(db, [first, second], options.ops, `q2-${(round += 1)}`));
    printTable(
      `Queued one-step runs: enqueued 8 at a time, dispatched and executed (${options.ops} runs, median of ${options.runs}; queue concurrency 16, 8 runs at once per engine)`,
      ['operation', 'runs/s', 'vs unqueued'],
      [
        ['unqueued (engine.run, c=8, 1 engine)', unqueued.opsPerSecond, '1.00'],
        ['queued, 1 worker', oneWorker.opsPerSecond, (oneWorker.opsPerSecond / unqueued.opsPerSecond).toFixed(2)],
        ['queued, 2 workers', twoWorkers.opsPerSecond, (twoWorkers.opsPerSecond / unqueued.opsPerSecond).toFixed(2)],
      ],
    );
    const latencyRuns = Math.min(300, options.ops);
    const plain = await startLatency(latencyRuns, (i) => first.start(oneStep, { scope: 'bench', key: `ls-${i}` }, { n: i }), (i) => `ls-${i}`);
    const queued = await startLatency(
      latencyRuns,
      (i) => first.enqueue(oneStep, { scope: 'bench', key: `lq-${i}` }, { n: i }, { queue }),
      (i) => `lq-${i}`,
    );
    const commitRuns = 200;
    const plainCommits = await commitsPerRun(db, commitRuns, (i) => first.run(oneStep, { scope: 'bench', key: `cu-${i}` }, { n: i }));
    const queuedCommits = await commitsPerRun(db, commitRuns, async (i) => {
      const handle = await first.enqueue(oneStep, { scope: 'bench', key: `cq-${i}` }, { n: i }, { queue });
      await handle.result();
      // The dispatch after its end has committed too.
      await new Promise((resolve) => setTimeout(resolve, 2));
    });
    printTable(
      `Start latency on an empty queue (call to the run's first line, ${latencyRuns} runs one at a time) and writing commits per run (${commitRuns} runs)`,
      ['operation', 'p50 ms', 'p99 ms', 'commits/run'],
      [
        ['engine.start (unqueued)', plain.p50, plain.p99, (plainCommits / commitRuns).toFixed(2)],
        ['engine.enqueue, a slot free', queued.p50, queued.p99, (queuedCommits / commitRuns).toFixed(2)],
      ],
    );
  } finally {
    await Promise.all([first.shutdown(), second.shutdown()]);
    await Promise.all(pools.map((pool) => pool.close()));
    await database.close();
  }
}
