/**
 * `npm run bench [name …]`: runs the benchmarks and prints their tables.
 * BENCH_OPS and BENCH_RUNS scale them (defaults 2000 ops, 3 runs). `workflow-cost`
 * prints the workflow benchmark's per-operation table alone; `cli` what each
 * command of the built CLI costs (BENCH_CLI_REPS repetitions, default 7); `citus` a 3-step
 * run on plain PostgreSQL beside a Citus cluster's (BENCH_CITUS_URL, BENCH_CITUS_WORKERS); `compare`
 * this checkout against another (BENCH_BASE), alternated in one process — not run by default.
 */
import { ledgerBench } from './ledger.bench.js';
import { workflowBench, workflowCostBench } from './workflow.bench.js';
import { workflowPartsBench } from './workflow-parts.bench.js';
import { trpcBench } from './trpc.bench.js';
import { httpBench } from './http.bench.js';
import { outboxBench } from './outbox.bench.js';
import { recoveryBench } from './recovery.bench.js';
import { waitsBench } from './waits.bench.js';
import { flowBench } from './flow.bench.js';
import { limitsBench } from './limits.bench.js';
import { cliBench } from './cli.bench.js';
import { citusBench } from './citus.bench.js';
import { compareBench } from './compare.bench.js';

const benches: Record<string, (options: { ops: number; runs: number }) => Promise<void>> = {
  ledger: ledgerBench,
  workflow: workflowBench,
  'workflow-cost': workflowCostBench,
  'workflow-parts': workflowPartsBench,
  trpc: trpcBench,
  http: httpBench,
  outbox: outboxBench,
  recovery: recoveryBench,
  waits: waitsBench,
  flow: flowBench,
  limits: limitsBench,
  cli: cliBench,
  citus: citusBench,
  compare: compareBench,
};

const wanted = process.argv.slice(2);
const options = { ops: Number(process.env.BENCH_OPS ?? 2000), runs: Number(process.env.BENCH_RUNS ?? 3) };
// workflow-cost is a part of workflow, for a quick look; compare needs another checkout: neither runs by default.
for (const name of wanted.length ? wanted : Object.keys(benches).filter((name) => name !== 'workflow-cost' && name !== 'compare')) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark '${name}'; known: ${Object.keys(benches).join(', ')}`);
    process.exit(2);
  }
  await bench(options);
}
