/**
 * `npm run bench [name …]`: runs the benchmarks and prints their tables.
 * BENCH_OPS and BENCH_RUNS scale them (defaults 2000 ops, 3 runs).
 */
import { ledgerBench } from './ledger.bench.js';
import { workflowBench } from './workflow.bench.js';
import { trpcBench } from './trpc.bench.js';
import { outboxBench } from './outbox.bench.js';
import { recoveryBench } from './recovery.bench.js';

const benches: Record<string, (options: { ops: number; runs: number }) => Promise<void>> = {
  ledger: ledgerBench,
  workflow: workflowBench,
  trpc: trpcBench,
  outbox: outboxBench,
  recovery: recoveryBench,
};

const wanted = process.argv.slice(2);
const options = { ops: Number(process.env.BENCH_OPS ?? 2000), runs: Number(process.env.BENCH_RUNS ?? 3) };
for (const name of wanted.length ? wanted : Object.keys(benches)) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark '${name}'; known: ${Object.keys(benches).join(', ')}`);
    process.exit(2);
  }
  await bench(options);
}
