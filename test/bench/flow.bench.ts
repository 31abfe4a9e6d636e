/**
 * Flow control: the throughput of queued one-step runs — enqueued by 1 and
 * by 8 callers at once, dispatched and executed by 1 and 2 engines (each its
 * own pool), on a queue and on a queue partitioned by tenant — as a ratio to
 * the same workflow run unqueued at the same concurrency, and to the same
 * runs started unqueued by as many callers (engine.start, which answers once
 * the run is durable, as an enqueue does) — in rounds after a pass that is
 * not counted, each measuring every row one after another, each ratio taken
 * to its own round's references (the unqueued one measured before and after
 * the round's other rows, and averaged).
 * Every measurement checks, from each run's start and end, that no instant
 * had more runs executing than the queue's or a partition's concurrency: a
 * violation fails the bench. Then the start latency of a run enqueued on an
 * empty queue against an unqueued start, and what a queued run costs the
 * database beside an unqueued one (statements, commits): 8 started at once
 * on an empty queue, and a backlog drained. Default durability.
 */
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine, type Engine } from '../../src/engine/engine.js';
import { costCells, costHeader, costPerOperation, type OperationCost } from './cost.js';
import { benchDatabase, measure, printTable, type Measurement } from './harness.js';

/** Each run's start and end in this process (performance.now()), by key. */
const spans = new Map<string, { start: number; end?: number; tenant: string }>();
/** Per measurement (a key's prefix, before its last '-'): how many of its runs' bodies have ended in this process. */
const ended = new Map<string, number>();

const oneStep = defineWorkflow({
  name: 'bench-flow-one',
  version: 1,
  input: z.object({ n: z.number(), tenant: z.string().default('') }),
  steps: { only: step('only.v1') },
  async run({ input, steps, ctx }) {
    const span: { start: number; end?: number; tenant: string } = { start: performance.now(), tenant: input.tenant };
    spans.set(ctx.key, span);
    await steps.only.tx(async (_db, { sql }) => {
      await sql`insert into bench_flow (n) values (${input.n})`;
    });
    span.end = performance.now();
    const prefix = ctx.key.slice(0, ctx.key.lastIndexOf('-'));
    ended.set(prefix, (ended.get(prefix) ?? 0) + 1);
  },
});

/** The concurrency of the queues and of the unqueued reference: an engine's default room. */
const CONCURRENCY = 8;
const PER_TENANT = 2;
const queue = defineQueue({ name: 'bench-flow', concurrency: CONCURRENCY });
const tenants = defineQueue<{ tenant: string }>({
  name: 'bench-flow-tenants',
  concurrency: CONCURRENCY,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: PER_TENANT },
});

const engineOn = (db: Database) =>
  createEngine({ database: db, workflows: [oneStep], queues: [queue, tenants], onError: () => {}, logger: false, maxConcurrentRuns: CONCURRENCY });

async function openRuns(db: Database, prefix: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from stepkey.ledger where kind = 'run' and key like ${prefix + '%'} and status <> 'completed'`;
  return row!.n;
}

/**
 * Until the `ops` runs of `prefix` have all completed: first their bodies' ends, counted in this
 * process, then their completions, read in the ledger. Not by polling the ledger alone: that read
 * scans the ledger, which grows through the bench, and every 5 ms it took the CPU of the runs it
 * waited for (about 2 ms a poll with 4,000–8,000 runs in the ledger, in a probe).
 */
async function allCompleted(db: Database, prefix: string, ops: number): Promise<void> {
  while ((ended.get(prefix) ?? 0) < ops) await new Promise((resolve) => setTimeout(resolve, 5));
  while ((await openRuns(db, prefix)) > 0) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** The most runs of `prefix` executing at one instant, in all and in one tenant. */
function mostAtOnce(prefix: string): { all: number; tenant: number } {
  const events: { at: number; delta: number; tenant: string }[] = [];
  for (const [key, span] of spans) {
    if (!key.startsWith(prefix) || span.end === undefined) continue;
    events.push({ at: span.start, delta: 1, tenant: span.tenant }, { at: span.end, delta: -1, tenant: span.tenant });
  }
  // Ends before starts at one instant: a slot given back is taken at the earliest after.
  events.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let all = 0;
  let most = { all: 0, tenant: 0 };
  const byTenant = new Map<string, number>();
  for (const event of events) {
    all += event.delta;
    const inTenant = (byTenant.get(event.tenant) ?? 0) + event.delta;
    byTenant.set(event.tenant, inTenant);
    most = { all: Math.max(most.all, all), tenant: Math.max(most.tenant, inTenant) };
  }
  return most;
}

/** `ops` runs enqueued by `callers` loops across `engines`, until every one has completed; fails on a limit exceeded. */
async function queuedThroughput(db: Database, engines: Engine[], ops: number, callers: number, prefix: string, partitioned: boolean): Promise<Measurement> {
  const t0 = performance.now();
  const enqueued = await measure(ops, callers, (i) =>
    engines[i % engines.length]!.enqueue(
      oneStep,
      { scope: 'bench', key: `${prefix}-${i}` },
      { n: i, tenant: partitioned ? `t${i % 8}` : '' },
      { queue: partitioned ? tenants : queue },
    ),
  );
  await allCompleted(db, prefix, ops);
  const opsPerSecond = ops / ((performance.now() - t0) / 1000);
  const most = mostAtOnce(prefix);
  if (most.all > CONCURRENCY || (partitioned && most.tenant > PER_TENANT)) {
    throw new Error(`flow bench: ${most.all} runs at once (queue concurrency ${CONCURRENCY}), ${most.tenant} in one tenant (per tenant ${PER_TENANT}) in '${prefix}'`);
  }
  return { opsPerSecond, p50Ms: enqueued.p50Ms, p99Ms: enqueued.p99Ms };
}

/**
 * `ops` runs started unqueued by `callers` loops (engine.start answers once the run is durable, as
 * engine.enqueue does, and the run executes after), until every one has completed: the reference
 * of the same call shape for the queued rows (the runs at once are not capped at the queue's 8).
 */
async function startedThroughput(db: Database, engine: Engine, ops: number, callers: number, prefix: string): Promise<Measurement> {
  const t0 = performance.now();
  const started = await measure(ops, callers, (i) => engine.start(oneStep, { scope: 'bench', key: `${prefix}-${i}` }, { n: i, tenant: '' }));
  await allCompleted(db, prefix, ops);
  return { opsPerSecond: ops / ((performance.now() - t0) / 1000), p50Ms: started.p50Ms, p99Ms: started.p99Ms };
}

/** From the call to the run's first line, one run at a time (the queue is empty each time). */
async function startLatency(ops: number, start: (i: number) => Promise<unknown>, keyOf: (i: number) => string): Promise<{ p50: number; p99: number }> {
  const latencies: number[] = [];
  for (let i = 0; i < ops; i += 1) {
    const t0 = performance.now();
    await start(i);
    while (!spans.has(keyOf(i))) await new Promise((resolve) => setImmediate(resolve));
    latencies.push(spans.get(keyOf(i))!.start - t0);
    // Let it end before the next one, so that the queue is empty again.
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  latencies.sort((a, b) => a - b);
  return { p50: latencies[Math.floor(latencies.length / 2)]!, p99: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))]! };
}

/** An operation's cost of `n` runs, per run. */
const perRun = (cost: OperationCost, n: number): OperationCost => ({
  statements: cost.statements / n,
  commits: cost.commits / n,
  walFlushes: cost.walFlushes / n,
  walRecords: cost.walRecords / n,
  walBytes: cost.walBytes / n,
  cpuMs: cost.cpuMs / n,
  postgresCpuMs: cost.postgresCpuMs / n,
});

/**
 * What `runs` runs cost, per run, over `batches` batches: each batch `start`s its runs (keys
 * `${prefix}-<batch>-<j>`) and waits until every one has ended — no polling of the ledger (its
 * reads would be counted) — and the dispatches after the last ends have committed too.
 */
async function costPerRun(
  url: string,
  label: string,
  batches: number,
  runs: number,
  prefix: string,
  start: (engine: Engine, keys: string[]) => Promise<unknown>,
): Promise<(string | number)[]> {
  let round = 0;
  const cost = await costPerOperation(
    url,
    batches,
    engineOn,
    async (engine) => {
      round += 1;
      const keys = Array.from({ length: runs }, (_, j) => `${prefix}-${round}-${j}`);
      await start(engine, keys);
      while (keys.some((key) => spans.get(key)?.end === undefined) || engine.activeRuns > 0) await new Promise((resolve) => setTimeout(resolve, 1));
      await new Promise((resolve) => setTimeout(resolve, 5));
    },
    (engine) => engine.shutdown(),
  );
  return [label, ...costCells(perRun(cost, runs))];
}

/** What 8 runs started at once cost, per run: unqueued, or enqueued (until all 8 have ended). */
const costAtOnce = (url: string, queued: boolean, label: string) =>
  costPerRun(url, label, 25, 8, `cost-${queued ? 'q' : 'u'}`, (engine, keys) =>
    Promise.all(
      keys.map((key, j) =>
        queued
          ? engine.enqueue(oneStep, { scope: 'bench', key }, { n: j, tenant: '' }, { queue })
          : engine.run(oneStep, { scope: 'bench', key }, { n: j, tenant: '' }),
      ),
    ),
  );

/**
 * What a run costs when a backlog is drained, per run: batches of 64 runs put on the queue by 8
 * callers at once (8 each, one after another; 56 of them wait in line and are started by
 * dispatches), or started unqueued the same way (engine.start), until all 64 have ended.
 */
const costDrained = (url: string, queued: boolean, label: string) =>
  costPerRun(url, label, 10, 64, `drain-${queued ? 'q' : 'u'}`, (engine, keys) =>
    Promise.all(
      Array.from({ length: 8 }, async (_, caller) => {
        for (let j = caller; j < keys.length; j += 8) {
          const ref = { scope: 'bench', key: keys[j]! };
          await (queued ? engine.enqueue(oneStep, ref, { n: j, tenant: '' }, { queue }) : engine.start(oneStep, ref, { n: j, tenant: '' }));
        }
      }),
    ),
  );

export async function flowBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const pools = [connect(database.url, { max: 20 }), connect(database.url, { max: 20 })];
  const [first, second] = [engineOn(pools[0]!), engineOn(pools[1]!)];
  const db = pools[0]!;
  try {
    await db.sql`create table bench_flow (id bigserial primary key, n int not null)`;
    // Rounds: each measures every row one after another, and each row's ratios are taken to the
    // references of its own round (a busy host's pace drifts between rounds more than within one).
    const cases: [string, Engine[], number, boolean][] = [
      ['queued, 1 enqueuer, 1 engine', [first], 1, false],
      ['queued, 8 enqueuers, 1 engine', [first], 8, false],
      ['queued, 8 enqueuers, 2 engines', [first, second], 8, false],
      [`queued by tenant (8 tenants, ${PER_TENANT} each), 8 enqueuers, 1 engine`, [first], 8, true],
    ];
    const startLabel = (callers: number) => `unqueued (engine.start, ${callers} caller${callers > 1 ? 's' : ''}, 1 engine)`;
    const unqueuedLabel = `unqueued (engine.run, ${CONCURRENCY} at once, 1 engine)`;
    const rounds: Map<string, { perSecond: number; vsUnqueued: number; vsStart?: number }>[] = [];
    const unqueuedRun = async (label: string) =>
      (await measure(options.ops, CONCURRENCY, (i) => first.run(oneStep, { scope: 'bench', key: `${label}-${i}` }, { n: i, tenant: '' }))).opsPerSecond;
    // A pass that is not counted: the first round's reference ran on a cold process (540 runs/s
    // against 785 at the end of the same round, then 851 and 854 in the next ones).
    await unqueuedRun('warm-u');
    await queuedThroughput(db, [first, second], Math.min(options.ops, 500), 8, 'warm-q', false);
    for (let round = 1; round <= options.runs; round += 1) {
      const measured = new Map<string, { perSecond: number; vsUnqueued: number; vsStart?: number }>();
      // The reference is measured before the round's other rows and again after them, and their mean
      // taken: the tables grow through a round, and the host's pace drifts.
      const before = await unqueuedRun(`u-${round}`);
      const starts = new Map<number, number>();
      for (const callers of [1, 8]) {
        starts.set(callers, (await startedThroughput(db, first, options.ops, callers, `s-${round}-${callers}`)).opsPerSecond);
      }
      const queued = new Map<string, number>();
      for (const [index, [label, engines, callers, partitioned]] of cases.entries()) {
        queued.set(label, (await queuedThroughput(db, engines, options.ops, callers, `q-${round}-${index}`, partitioned)).opsPerSecond);
      }
      const unqueued = (before + (await unqueuedRun(`u2-${round}`))) / 2;
      measured.set(unqueuedLabel, { perSecond: unqueued, vsUnqueued: 1 });
      for (const [callers, started] of starts) measured.set(startLabel(callers), { perSecond: started, vsUnqueued: started / unqueued, vsStart: 1 });
      for (const [label, , callers] of cases) {
        const perSecond = queued.get(label)!;
        measured.set(label, { perSecond, vsUnqueued: perSecond / unqueued, vsStart: perSecond / starts.get(callers)! });
      }
      rounds.push(measured);
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const rowOf = (label: string): (string | number)[] => {
      const all = rounds.map((measured) => measured.get(label)!);
      const vsStart = all.every((one) => one.vsStart !== undefined) ? median(all.map((one) => one.vsStart!)).toFixed(2) : '—';
      return [label, median(all.map((one) => one.perSecond)), median(all.map((one) => one.vsUnqueued)).toFixed(2), vsStart,
        all.map((one) => one.vsUnqueued.toFixed(2)).join(' ')];
    };
    printTable(
      `Queued one-step runs, dispatched and executed (${options.ops} runs; median of ${options.runs} rounds, each measuring every row one after ` +
        `another, each ratio to its own round's references, the unqueued one the mean of a measurement before and after the rest; queue concurrency ${CONCURRENCY}, ${CONCURRENCY} runs at once per engine; no instant exceeded a limit)`,
      ['operation', 'runs/s', 'vs unqueued', 'vs engine.start, same callers', 'vs unqueued, each round'],
      [unqueuedLabel, startLabel(1), startLabel(8), ...cases.map(([label]) => label)].map(rowOf),
    );
    const latencyRuns = Math.min(300, options.ops);
    const plain = await startLatency(latencyRuns, (i) => first.start(oneStep, { scope: 'bench', key: `ls-${i}` }, { n: i, tenant: '' }), (i) => `ls-${i}`);
    const queued = await startLatency(
      latencyRuns,
      (i) => first.enqueue(oneStep, { scope: 'bench', key: `lq-${i}` }, { n: i, tenant: '' }, { queue }),
      (i) => `lq-${i}`,
    );
    printTable(`Start latency on an empty queue (call to the run's first line, ${latencyRuns} runs one at a time)`, ['operation', 'p50 ms', 'p99 ms'], [
      ['engine.start (unqueued)', plain.p50, plain.p99],
      ['engine.enqueue, a slot free', queued.p50, queued.p99],
    ]);
    printTable('What a run costs, 8 started at once (per run; begin and commit counted as statements)', ['operation', ...costHeader], [
      await costAtOnce(database.url, false, 'unqueued (engine.run)'),
      await costAtOnce(database.url, true, 'queued (engine.enqueue, then its end)'),
    ]);
    printTable(
      'What a run costs when a backlog is drained: 64 runs put on the queue by 8 callers at once, until all have ended (per run; 56 wait in line)',
      ['operation', ...costHeader],
      [await costDrained(database.url, false, 'unqueued (engine.start, 8 callers)'), await costDrained(database.url, true, 'queued (engine.enqueue, 8 callers)')],
    );
  } finally {
    await Promise.all([first.shutdown(), second.shutdown()]);
    await Promise.all(pools.map((pool) => pool.close()));
    await database.close();
  }
}
