/**
 * A queued workflow and the processes of the flow-control crash test.
 *
 *   node --import tsx flow-workers.ts enqueue <db> <prefix> <n>   enqueues n runs over 5 tenants, prints ENQUEUED, stops gracefully
 *   node --import tsx flow-workers.ts work <db>                   sweeps and dispatches until killed, prints READY
 *
 * Each run records its start and end in flow_e2e (tx steps: each commits
 * once) with the process that executed it, and calls out in between.
 */
import { z } from 'zod';
import { connect } from '../../../src/db/connect.js';
import { defineQueue } from '../../../src/flow/define-queue.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { createEngine } from '../../../src/engine/engine.js';

export const tenants = defineQueue<{ tenant: string }>({
  name: 'e2e-tenants',
  concurrency: 5,
  partitionBy: (input) => input.tenant,
  perPartition: { concurrency: 2 },
});

export const queued = defineWorkflow({
  name: 'e2e-queued',
  version: 1,
  input: z.object({ tenant: z.string() }),
  steps: { begin: step('begin.v1'), work: step('work.v1'), end: step('end.v1') },
  async run({ input, steps, ctx }) {
    await steps.begin.tx(async (_db, { sql }) => {
      await sql`insert into flow_e2e (run, tenant, step, pid, at) values (${ctx.key}, ${input.tenant}, 'begin', ${process.pid}, clock_timestamp())`;
    });
    await steps.work.call(() => new Promise((resolve) => setTimeout(resolve, 300)));
    await steps.end.tx(async (_db, { sql }) => {
      await sql`insert into flow_e2e (run, tenant, step, pid, at) values (${ctx.key}, ${input.tenant}, 'end', ${process.pid}, clock_timestamp())`;
    });
    return 'done';
  },
});

async function main(): Promise<void> {
  const [mode, url, prefix, n] = process.argv.slice(2) as [string, string, string?, string?];
  // Named by process, so that a test can tell when a killed worker's backends are gone.
  const database = connect(url, { max: 6, applicationName: `flow-worker-${process.pid}` });
  const engine = createEngine({ database, workflows: [queued], queues: [tenants], maxConcurrentRuns: 4, onError: () => {} });
  if (mode === 'enqueue') {
    for (let i = 0; i < Number(n); i += 1) {
      const tenant = `t${i % 5}`;
      await engine.enqueue(queued, { scope: 'e2e', key: `${prefix}-${i}` }, { tenant }, { queue: tenants });
    }
    console.log('ENQUEUED');
    await engine.shutdown();
    await database.close();
  } else if (mode === 'work') {
    engine.startSweeper();
    console.log('READY');
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
