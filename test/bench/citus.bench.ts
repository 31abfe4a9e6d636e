/**
 * `npm run bench citus`: a 3-step run (tx, call, tx) on plain PostgreSQL and
 * on a Citus cluster, measured in one run: runs/s at concurrency 16, and per
 * run the statements stepkey sent, the commits on the coordinator and on
 * each worker (pg_stat_database of the run's database), and the two-phase
 * commits (rows Citus wrote into pg_dist_transaction, one per worker that
 * prepared). The Citus row needs BENCH_CITUS_URL (the coordinator, any
 * database) and BENCH_CITUS_WORKERS (host:port,host:port); without them only
 * plain PostgreSQL is measured. Plain PostgreSQL is DATABASE_URL's server (or
 * an embedded one).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { Engine } from '../../src/engine/engine.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createCitusDatabase, dropCitusDatabase, type CitusNodes } from '../citus/database.js';
import { benchDatabase, measure, printTable } from './harness.js';
import { withDatabase } from '../helpers/urls.js';

const threeSteps = defineWorkflow({
  name: 'bench-three',
  version: 1,
  input: z.object({ n: z.number().int() }),
  output: z.object({ n: z.number() }),
  steps: { a: step('a.v1'), b: step('b.v1'), c: step('c.v1') },
  async run({ input, steps }) {
    const a = await steps.a.tx(async () => input.n);
    const b = await steps.b.call(async () => a + 1);
    const c = await steps.c.tx(async () => b + 1);
    return { n: c };
  },
});

interface NodeCounters {
  commits: number;
  prepared: number;
}

/** Commits of `database` on the node at `url`; prepared transactions recorded if it is a coordinator. */
async function nodeCounters(url: string): Promise<NodeCounters> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ commits: string; prepared: string | null }[]>`
      select (select xact_commit from pg_stat_database where datname = current_database())::text as commits,
             (select n_tup_ins from pg_stat_sys_tables where relname = 'pg_dist_transaction')::text as prepared`;
    return { commits: Number(row!.commits), prepared: Number(row!.prepared ?? 0) };
  } finally {
    await sql.end();
  }
}

interface Row {
  target: string;
  runsPerSecond: number;
  statements: number;
  commits: number[];
  twoPhase: number;
}

async function measureTarget(target: string, url: string, nodeUrls: string[], ops: number): Promise<Row> {
  let statements = 0;
  let counting = false;
  const database = connect(url, { max: 20, onStatement: () => (counting ? (statements += 1) : undefined) });
  const engine = new Engine({ database, workflows: [threeSteps], onError: () => {} });
  const tag = randomBytes(3).toString('hex');
  try {
    await engine.run(threeSteps, { scope: 'warm', key: `warm-${tag}` }, { n: 0 });
    await sleep(1200);
    const before = await Promise.all(nodeUrls.map(nodeCounters));
    counting = true;
    const result = await measure(ops, 16, (i) => engine.run(threeSteps, { scope: `tenant-${i % 50}`, key: `b-${tag}-${i}` }, { n: i }));
    counting = false;
    await engine.shutdown();
    await database.close();
    // Counters are reported by each backend a moment after its transaction (and as its connection closes).
    await sleep(1500);
    const after = await Promise.all(nodeUrls.map(nodeCounters));
    return {
      target,
      runsPerSecond: result.opsPerSecond,
      statements: statements / ops,
      commits: after.map((a, i) => (a.commits - before[i]!.commits) / ops),
      twoPhase: (after[0]!.prepared - before[0]!.prepared) / ops,
    };
  } finally {
    await engine.shutdown().catch(() => {});
    await database.close().catch(() => {});
  }
}

export async function citusBench(options: { ops: number }): Promise<void> {
  const ops = Math.min(options.ops, 2000);
  const rows: Row[] = [];
  const plain = await benchDatabase();
  try {
    rows.push(await measureTarget('PostgreSQL', plain.url, [plain.url], ops));
  } finally {
    await plain.close();
  }
  const coordinatorUrl = process.env.BENCH_CITUS_URL;
  const workers = (process.env.BENCH_CITUS_WORKERS ?? '').split(',').filter(Boolean);
  if (coordinatorUrl && workers.length) {
    const nodes: CitusNodes = { coordinatorUrl, workers };
    const name = `stepkey_bench_citus_${randomBytes(3).toString('hex')}`;
    const url = await createCitusDatabase(nodes, name);
    try {
      const workerUrls = workers.map((node) => {
        const parsed = new URL(withDatabase(coordinatorUrl, name));
        [parsed.hostname, parsed.port] = node.split(':') as [string, string];
        return parsed.toString();
      });
      rows.push(await measureTarget(`Citus (1 + ${workers.length} nodes)`, url, [url, ...workerUrls], ops));
    } finally {
      await dropCitusDatabase(nodes, name);
    }
  } else {
    console.log('\n(no Citus row: set BENCH_CITUS_URL and BENCH_CITUS_WORKERS to measure a cluster)');
  }
  const width = Math.max(...rows.map((row) => row.commits.length));
  printTable(
    `A 3-step run (tx, call, tx), ${ops} runs over 50 scopes at concurrency 16: per run`,
    ['target', 'runs/s', 'statements', ...Array.from({ length: width }, (_, i) => (i === 0 ? 'commits (coordinator)' : `commits (worker ${i})`)), '2PC'],
    rows.map((row) => [
      row.target,
      row.runsPerSecond,
      row.statements.toFixed(1),
      ...Array.from({ length: width }, (_, i) => (row.commits[i] === undefined ? '' : row.commits[i]!.toFixed(2))),
      row.twoPhase.toFixed(2),
    ]),
  );
}
