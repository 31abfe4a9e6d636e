/**
 * Runs that wait: what a parked run costs (connections and memory before and
 * after 2,000 runs park), how late a woken run continues after its wake time
 * with 1, 100 and 2,000 parked runs falling due at once (and how long 2,000
 * take to drain), and how soon a waiting run continues after `send` — in the
 * sending process (a prompt wake) and in another one (the next sweep).
 * Beside the burst, its reference: the same process running as many new
 * one-step runs (the same step) at the same concurrency; and 1,000 runs that
 * sleep 2 s, started as fast as the process starts them, woken by it.
 * Defaults everywhere: lease 8 s, sweep every 1 s, 8 runs at once per process.
 */
import { loadavg } from 'node:os';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine, type Engine } from '../../src/engine/engine.js';
import { benchDatabase, printTable } from './harness.js';

const napper = defineWorkflow({
  name: 'bench-nap',
  version: 1,
  input: z.object({ until: z.number() }),
  steps: { nap: step('nap.v1'), after: step('after.v1') },
  async run({ input, steps, ctx }) {
    await steps.nap.sleepUntil(new Date(input.until));
    await steps.after.tx(async (_db, { sql }) => {
      await sql`insert into bench_wakes (run_key, at) values (${ctx.rootKey}, clock_timestamp())`;
    });
  },
});

const listener = defineWorkflow({
  name: 'bench-listen',
  version: 1,
  input: z.object({}),
  events: { ping: z.object({ sentAt: z.number() }) },
  steps: { ping: step('ping.v1'), after: step('after.v1') },
  async run({ steps, ctx }) {
    const { payload } = await steps.ping.waitForEvent('ping');
    await steps.after.tx(async (_db, { sql }) => {
      await sql`insert into bench_wakes (run_key, at, sent_at) values (${ctx.rootKey}, clock_timestamp(), to_timestamp(${payload.sentAt}::float8 / 1000))`;
    });
  },
});

/** The reference: a new run doing what a woken napper does after its wake. */
const oneStep = defineWorkflow({
  name: 'bench-one-step',
  version: 1,
  input: z.object({}),
  steps: { after: step('after.v1') },
  async run({ steps, ctx }) {
    await steps.after.tx(async (_db, { sql }) => {
      await sql`insert into bench_wakes (run_key, at) values (${ctx.rootKey}, clock_timestamp())`;
    });
  },
});

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

async function count(db: Database, sql: string): Promise<number> {
  return Number((await db.sql.unsafe(sql))[0]!.n);
}

async function parkedCost(db: Database): Promise<(string | number)[][]> {
  const engine = createEngine({ database: db, workflows: [napper], onError: () => {}, logger: false });
  const connections = () => count(db, `select count(*)::int as n from pg_stat_activity where datname = current_database()`);
  global.gc?.();
  const before = { connections: await connections(), heap: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss };
  const until = Date.now() + 3_600_000;
  for (let i = 0; i < 2_000; i += 1) await engine.attempt(napper, { scope: 'bench-park', key: `park-${i}` }, { until });
  global.gc?.();
  const after = { connections: await connections(), heap: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss };
  const parked = await count(db, `select count(*)::int as n from stepkey.ledger where status = 'waiting' and scope = 'bench-park'`);
  // 98,000 more, in bulk: copies of a row the park statement wrote, each its own key. The process
  // then sweeps a few times (none is due) with 100,000 parked.
  const columns = (await db.sql<{ name: string }[]>`
    select column_name as name from information_schema.columns
     where table_schema = 'stepkey' and table_name = 'ledger' and is_generated = 'NEVER' order by ordinal_position`).map((c) => c.name);
  const copied = columns.map((c) => (c === 'key' ? `'park-bulk-' || n` : `l.${c}`)).join(', ');
  await db.sql.unsafe(
    `insert into stepkey.ledger (${columns.join(', ')})
     select ${copied} from stepkey.ledger l, generate_series(1, 98000) n where l.scope = 'bench-park' and l.key = 'park-0'`,
  );
  engine.startSweeper();
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  global.gc?.();
  const bulk = { connections: await connections(), heap: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss };
  const allParked = await count(db, `select count(*)::int as n from stepkey.ledger where status = 'waiting' and scope = 'bench-park'`);
  const executing = engine.activeRuns;
  await engine.shutdown();
  const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  return [
    ['parked runs', 0, parked, allParked],
    ['runs executing in the process', 0, 0, executing],
    ['connections to the database', before.connections, after.connections, bulk.connections],
    ['heap used', mb(before.heap), mb(after.heap), mb(bulk.heap)],
    ['resident set', mb(before.rss), mb(after.rss), mb(bulk.rss)],
  ];
}

/** `runs` runs sleeping until one instant; a worker's sweeper wakes them. */
async function wakeLatency(db: Database, runs: number): Promise<{ p50: number; p99: number; drainMs: number }> {
  await db.sql`truncate bench_wakes`;
  const starter = createEngine({ database: db, workflows: [napper], onError: () => {}, logger: false });
  const until = Date.now() + 3_000 + runs * 4;
  const scope = `bench-wake-${runs}`;
  for (let i = 0; i < runs; i += 8) {
    await Promise.all(
      Array.from({ length: Math.min(8, runs - i) }, (_, j) => starter.attempt(napper, { scope, key: `wake-${i + j}` }, { until })),
    );
  }
  await starter.shutdown();
  const worker = createEngine({ database: db, workflows: [napper], onError: () => {}, logger: false });
  worker.startSweeper();
  const deadline = Date.now() + 300_000;
  while ((await count(db, `select count(*)::int as n from bench_wakes`)) < runs && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await worker.shutdown();
  const late = (await db.sql<{ ms: number }[]>`select (extract(epoch from at) * 1000 - ${until}::float8) as ms from bench_wakes`)
    .map((row) => row.ms)
    .sort((a, b) => a - b);
  return { p50: percentile(late, 50), p99: percentile(late, 99), drainMs: late.at(-1) ?? 0 };
}

/** How long the process takes to run `runs` new one-step runs, 8 at once (its default concurrency). */
async function newRunsMs(db: Database, runs: number): Promise<number> {
  await db.sql`truncate bench_wakes`;
  const engine = createEngine({ database: db, workflows: [oneStep], onError: () => {}, logger: false });
  let next = 0;
  const began = performance.now();
  await Promise.all(
    Array.from({ length: engine.maxConcurrentRuns }, async () => {
      while (next < runs) {
        const i = next;
        next += 1;
        await engine.run(oneStep, { scope: 'bench-new', key: `new-${i}` }, {});
      }
    }),
  );
  const ms = performance.now() - began;
  await engine.shutdown();
  return ms;
}

/**
 * `runs` runs that sleep `napMs`, started by 8 loops as fast as one process
 * starts them; the same process wakes them. How late the step after the
 * wake came, against each run's own wake time.
 */
async function sleepersLateness(db: Database, runs: number, napMs: number): Promise<{ p50: number; p99: number; load: number }> {
  await db.sql`truncate bench_wakes`;
  const engine = createEngine({ database: db, workflows: [napper], onError: () => {}, logger: false });
  engine.startSweeper();
  const until = new Map<string, number>();
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < runs) {
        const i = next;
        next += 1;
        const at = Date.now() + napMs;
        const handle = await engine.start(napper, { scope: 'bench-sleepers', key: `sleep-${i}` }, { until: at });
        if (handle.rootKey) until.set(handle.rootKey, at);
      }
    }),
  );
  const deadline = Date.now() + 300_000;
  while ((await count(db, `select count(*)::int as n from bench_wakes`)) < runs && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const load = loadavg()[0]!;
  await engine.shutdown();
  const late = (await db.sql<{ run_key: string; ms: number }[]>`select run_key, extract(epoch from at) * 1000 as ms from bench_wakes`)
    .map((row) => Number(row.ms) - (until.get(row.run_key) ?? Number.NaN))
    .sort((a, b) => a - b);
  return { p50: percentile(late, 50), p99: percentile(late, 99), load };
}


let unblock: () => void = () => {};
let holding = false;
/** Woken right after its start (a short sleep), it then holds its process's room until unblocked. */
const blocker = defineWorkflow({
  name: 'bench-blocker',
  version: 1,
  input: z.object({}),
  steps: { nap: step('nap.v1'), hold: step('hold.v1') },
  async run({ steps }) {
    await steps.nap.sleepUntil(new Date(Date.now() + 1));
    await steps.hold.call(() => new Promise<void>((resolve) => ((holding = true), (unblock = resolve))));
  },
});

/**
 * A send to a waiting run, until its waiting step has continued: in the
 * sending process (a prompt wake), or — the sender's room for woken runs
 * taken — in a worker, by its next sweep.
 */
async function sendLatency(db: Database, prompt: boolean, runs: number): Promise<{ p50: number; p99: number }> {
  await db.sql`truncate bench_wakes`;
  const scope = `bench-send-${prompt ? 'prompt' : 'sweep'}`;
  const starter = createEngine({ database: db, workflows: [listener], onError: () => {}, logger: false });
  for (let i = 0; i < runs; i += 1) await starter.attempt(listener, { scope, key: `listen-${i}` }, {});
  await starter.shutdown();
  const sender = createEngine({ database: db, workflows: [listener, blocker], onError: () => {}, logger: false, maxConcurrentRuns: prompt ? 8 : 1 });
  let worker: Engine | undefined;
  if (!prompt) {
    // The sender's one room for woken runs is taken by a run it woke, which holds it.
    await sender.start(blocker, { scope, key: 'busy' }, {});
    while (!holding) await new Promise((resolve) => setTimeout(resolve, 10));
    worker = createEngine({ database: db, workflows: [listener], onError: () => {}, logger: false });
    worker.startSweeper();
  }
  for (let i = 0; i < runs; i += 1) {
    await sender.send({ scope, key: `listen-${i}` }, 'ping', { sentAt: Date.now() }, { key: `ping-${i}` });
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const deadline = Date.now() + 60_000;
  while ((await count(db, `select count(*)::int as n from bench_wakes`)) < runs && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  unblock();
  await sender.shutdown();
  await worker?.shutdown();
  const delays = (await db.sql<{ ms: number }[]>`select extract(epoch from (at - sent_at)) * 1000 as ms from bench_wakes`)
    .map((row) => Number(row.ms))
    .sort((a, b) => a - b);
  return { p50: percentile(delays, 50), p99: percentile(delays, 99) };
}

export async function waitsBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 20 });
  try {
    await db.sql`create table bench_wakes (run_key text, at timestamptz, sent_at timestamptz)`;
    printTable('Parked runs: what runs waiting cost (one process; heap after a GC when run with --expose-gc)', ['measure', 'before', 'after parking 2,000', '100,000 parked, 3 sweeps'], await parkedCost(db));

    const rows: (string | number)[][] = [];
    let drained = 0;
    for (const runs of [1, 100, 2_000]) {
      const { p50, p99, drainMs } = await wakeLatency(db, runs);
      if (runs === 2_000) drained = drainMs;
      rows.push([runs, p50, p99, runs === 2_000 ? `${(drainMs / 1000).toFixed(1)} s` : '—']);
    }
    printTable('Wake latency after the wake time (one worker, sweep every 1 s)', ['parked runs', 'p50 ms', 'p99 ms', 'last woke after'], rows);
    const reference = await newRunsMs(db, 2_000);
    printTable('2,000 due at one instant, beside 2,000 new one-step runs in the same process', ['measure', 'seconds', 'ratio'], [
      ['2,000 new one-step runs, 8 at once (the reference)', (reference / 1000).toFixed(1), '1.00'],
      ['2,000 parked runs due at once, all continued', (drained / 1000).toFixed(1), (drained / reference).toFixed(2)],
    ]);
    const sleepers = await sleepersLateness(db, 1_000, 2_000);
    printTable('1,000 runs sleeping 2 s, started as fast as the process starts them: the step after the wake, late by', ['p50 ms', 'p99 ms', 'load (1 min) at the end'], [
      [Math.round(sleepers.p50), Math.round(sleepers.p99), sleepers.load.toFixed(2)],
    ]);

    const sends = Math.min(200, options.ops);
    const prompt = await sendLatency(db, true, sends);
    const swept = await sendLatency(db, false, sends);
    printTable(`send → the waiting step continued (${sends} sends)`, ['where', 'p50 ms', 'p99 ms'], [
      ['in the sending process (prompt wake)', prompt.p50, prompt.p99],
      ['in a worker, the sender busy (its next sweep)', swept.p50, swept.p99],
    ]);
  } finally {
    await db.close();
    await database.close();
  }
}
