/**
 * Workflows: a 3-step workflow whose steps are tx steps writing one row each,
 * against the ceiling — the same work as N+1 bare transactions through
 * postgres.js (what an engine that folds the run's start into its first step
 * must issue at least), in the same process.
 */
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine } from '../../src/workflow/engine.js';
import { benchDatabase, measure, medianOf, printTable } from './harness.js';

const threeSteps = defineWorkflow({
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

export async function workflowBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 40 });
  const engine = createEngine({ database: db, workflows: [threeSteps], onError: () => {} });
  try {
    await db.sql`create table bench_rows (id bigserial primary key, n int not null)`;
    const rows: (string | number)[][] = [];
    let prefix = 0;
    for (const concurrency of [1, 8, 32]) {
      const ceiling = await medianOf(options.runs, () =>
        measure(options.ops, concurrency, async (i) => {
          for (let t = 0; t < 4; t += 1) await db.sql.begin((tx) => tx`insert into bench_rows (n) values (${i})`);
        }),
      );
      const engineRuns = await medianOf(options.runs, () => {
        prefix += 1;
        const run = prefix;
        return measure(options.ops, concurrency, (i) => engine.run(threeSteps, { scope: 'bench', key: `w-${run}-${i}` }, { n: i }));
      });
      rows.push([`4 bare transactions, c=${concurrency}`, ceiling.opsPerSecond, ceiling.p50Ms, ceiling.p99Ms, '1.00']);
      rows.push([
        `3-step workflow, c=${concurrency}`,
        engineRuns.opsPerSecond,
        engineRuns.p50Ms,
        engineRuns.p99Ms,
        (engineRuns.opsPerSecond / ceiling.opsPerSecond).toFixed(2),
      ]);
    }
    printTable(
      `Workflows (${options.ops} runs per measurement, median of ${options.runs})`,
      ['operation', 'runs/s', 'p50 ms', 'p99 ms', 'vs ceiling'],
      rows,
    );
  } finally {
    await engine.shutdown();
    await db.close();
    await database.close();
  }
}
