/**
 * `BENCH_BASE=<another checkout> npm run bench -- compare`: this checkout
 * against another build of stepkey, both loaded in this one process, each
 * on a database of its own on one cluster, alternated phase by phase
 * (BENCH_PHASES pairs, default 16; BENCH_OPS runs a phase, default 1,500):
 * one-step runs put on a queue of 8 by 8 enqueuers until all have ended
 * (BENCH_COMPARE=queued, the default), or `engine.run` 8 at once
 * (BENCH_COMPARE=run). Per phase, runs/s and the CPU per run of this
 * process and of the whole PostgreSQL cluster (from /proc: the server must
 * run on this machine); printed as each build's means and the mean of the
 * paired differences with its standard error.
 *
 * Why in one process, paired: this host's pace drifts between processes by
 * more than the changes worth measuring (the same code gave 1.30 to 2.00 ms
 * of PostgreSQL CPU a queued run from one process to the next), and two
 * processes measured one after another have mistaken that drift for a gain.
 * Neighbouring phases share the host's state; their difference does not.
 *
 * The other checkout needs its dependencies (its own `npm ci`, or a link to
 * this one's node_modules); its modules are imported from its `src/` as
 * this one's are, each with its own zod.
 */
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { existsSync } from 'node:fs';
import { clusterCpuMs, postmasterOf } from './cost.js';
import { benchDatabase, emptyDatabase, printTable } from './harness.js';

const CONCURRENCY = 8;

/** A tx step's SQL tag, as the run below uses it. */
type Tag = (strings: TemplateStringsArray, ...values: unknown[]) => Promise<unknown>;

interface Build {
  label: string;
  phase(prefix: string, runs: number): Promise<void>;
  close(): Promise<void>;
}

interface Sample {
  perSecond: number;
  nodeMs: number;
  postgresMs: number;
}

/** Imports `path` (under `root`'s src/) as that build's module. */
const load = (root: string, path: string) => import(pathToFileURL(join(root, 'src', path)).href);

/** A build of stepkey at `root`, on a database of its own (migrated by that build) of the server at `adminUrl`. */
async function openBuild(root: string, label: string, adminUrl: string, mode: string): Promise<Build> {
  const [{ connect }, { migrate }, { defineQueue }, { defineWorkflow, step }, { createEngine }] = await Promise.all(
    ['db/connect.ts', 'db/migrate.ts', 'flow/define-queue.ts', 'workflow/define.ts', 'engine/engine.ts'].map((path) => load(root, path)),
  );
  const { z } = await import(pathToFileURL(createRequire(join(root, 'package.json')).resolve('zod')).href);
  const database = await emptyDatabase(adminUrl, `compare_${label}`);
  // Dropped again if this build cannot be set up on it (its migrations fail, say).
  let db: { sql: Tag; close(): Promise<void> } | undefined;
  try {
    await migrate(database.url);
    db = connect(database.url, { max: 20 }) as { sql: Tag; close(): Promise<void> };
    await db.sql`create table bench_compare (id bigserial primary key, n int not null)`;
  } catch (error) {
    await db?.close();
    await database.drop();
    throw error;
  }
  const ended = new Map<string, number>();
  const oneStep = defineWorkflow({
    name: 'bench-compare-one',
    version: 1,
    input: z.object({ n: z.number() }),
    steps: { only: step('only.v1') },
    async run({ input, steps, ctx }: { input: { n: number }; steps: { only: { tx(body: (db: unknown, tx: { sql: Tag }) => Promise<void>): Promise<unknown> } }; ctx: { key: string } }) {
      await steps.only.tx(async (_db, { sql }) => {
        await sql`insert into bench_compare (n) values (${input.n})`;
      });
      const prefix = ctx.key.slice(0, ctx.key.lastIndexOf('-'));
      ended.set(prefix, (ended.get(prefix) ?? 0) + 1);
    },
  });
  const queue = defineQueue({ name: 'bench-compare', concurrency: CONCURRENCY });
  const engine = createEngine({ database: db, workflows: [oneStep], queues: [queue], onError: () => {}, logger: false, maxConcurrentRuns: CONCURRENCY });
  const loops = async (runs: number, one: (i: number) => Promise<unknown>) => {
    let next = 0;
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next < runs) await one(next++);
    }));
  };
  return {
    label,
    async phase(prefix, runs) {
      const ref = (i: number) => ({ scope: 'bench', key: `${prefix}-${i}` });
      if (mode === 'run') return loops(runs, (i) => engine.run(oneStep, ref(i), { n: i }));
      await loops(runs, (i) => engine.enqueue(oneStep, ref(i), { n: i }, { queue }));
      while ((ended.get(prefix) ?? 0) < runs) await new Promise((done) => setTimeout(done, 5));
    },
    async close() {
      await engine.shutdown();
      await db.close();
      await database.drop();
    },
  };
}

const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
const standardError = (values: readonly number[]) => {
  const m = mean(values);
  return Math.sqrt(values.reduce((sum, value) => sum + (value - m) ** 2, 0) / (values.length - 1) / values.length);
};

export async function compareBench(options: { ops: number }): Promise<void> {
  const other = process.env.BENCH_BASE;
  if (!other) throw new Error('compare: set BENCH_BASE to another checkout of stepkey (with its dependencies) to compare this one with');
  const mode = process.env.BENCH_COMPARE ?? 'queued';
  if (mode !== 'queued' && mode !== 'run') throw new Error(`compare: BENCH_COMPARE is queued or run, not '${mode}'`);
  const baseRoot = resolve(other);
  if (!existsSync(join(baseRoot, 'src', 'engine', 'engine.ts'))) throw new Error(`compare: BENCH_BASE '${other}' is not a checkout of stepkey (no src/engine/engine.ts there)`);
  const phases = Number(process.env.BENCH_PHASES ?? 16);
  if (!Number.isInteger(phases) || phases < 2) throw new Error(`compare: BENCH_PHASES is a whole number of pairs, at least 2 (for a standard error), not '${process.env.BENCH_PHASES}'`);
  const runs = process.env.BENCH_OPS ? options.ops : 1500;
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`compare: BENCH_OPS is a whole number of runs a phase, not '${process.env.BENCH_OPS}'`);
  const database = await benchDatabase();
  const builds: Build[] = [];
  const samples = new Map<string, Sample[]>([['this', []], ['base', []]]);
  try {
    const postmaster = await postmasterOf(database.url);
    if (postmaster === undefined) throw new Error('compare: the PostgreSQL server must run on this machine (its CPU is read from /proc)');
    builds.push(await openBuild(process.cwd(), 'this', database.url, mode));
    builds.push(await openBuild(baseRoot, 'base', database.url, mode));
    // A phase of each, uncounted: both builds' code compiled and their databases warm before the first pair.
    for (const build of builds) await build.phase('warm', runs);
    for (let pair = 0; pair < phases; pair += 1) {
      // Each build first in every other pair: neither always follows the other.
      for (const build of pair % 2 === 0 ? builds : [...builds].reverse()) {
        const node = process.cpuUsage();
        const cluster = clusterCpuMs(postmaster);
        const started = performance.now();
        await build.phase(`p${pair}`, runs);
        const elapsed = performance.now() - started;
        const used = process.cpuUsage(node);
        samples.get(build.label)!.push({
          perSecond: (runs * 1000) / elapsed,
          nodeMs: (used.user + used.system) / 1000 / runs,
          postgresMs: (clusterCpuMs(postmaster) - cluster) / runs,
        });
      }
    }
  } finally {
    for (const build of builds) await build.close();
    await database.close();
  }
  const [mine, base] = [samples.get('this')!, samples.get('base')!];
  const row = (label: string, pick: (sample: Sample) => number, digits: number) => {
    const differences = mine.map((sample, i) => pick(sample) - pick(base[i]!));
    return [label, mean(base.map(pick)).toFixed(digits), mean(mine.map(pick)).toFixed(digits), `${mean(differences).toFixed(digits)} ± ${standardError(differences).toFixed(digits)}`];
  };
  printTable(
    `This checkout against ${other} (${mode === 'run' ? 'engine.run, 8 at once' : 'one-step runs on a queue of 8, 8 enqueuers'}; ${phases} pairs of phases of ${runs} runs, alternated in one process; the difference is this checkout's less the base's, with its standard error)`,
    ['measure', 'base', 'this checkout', 'difference'],
    [row('runs/s', (s) => s.perSecond, 0), row('Node CPU ms a run', (s) => s.nodeMs, 3), row('PostgreSQL CPU ms a run', (s) => s.postgresMs, 3)],
  );
}
