/**
 * Ledger micro-benchmark: a keyed write with claim-and-commit (`once`) against
 * the same write in a bare postgres.js transaction, and replay latency.
 */
import postgres from 'postgres';
import { connect } from '../../src/db/connect.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { benchDatabase, measure, medianOf, printTable } from './harness.js';

export async function ledgerBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const db = connect(database.url, { max: 40 });
  let statements = 0;
  const counting = postgres(database.url, { max: 4, onnotice: () => {}, debug: () => (statements += 1) });
  try {
    await db.sql`create table bench_orders (id bigserial primary key, order_key text not null, amount int not null)`;
    const ledger = new Ledger({ sql: db.sql });
    const countingLedger = new Ledger({ sql: counting });
    const rows: (string | number)[][] = [];
    let prefix = 0;

    for (const concurrency of [1, 8]) {
      const bare = await medianOf(options.runs, () =>
        measure(options.ops, concurrency, (i) =>
          db.sql.begin((tx) => tx`insert into bench_orders (order_key, amount) values (${`bare-${i}`}, 100)`),
        ),
      );
      const keyed = await medianOf(options.runs, () => {
        prefix += 1;
        const run = prefix;
        return measure(options.ops, concurrency, (i) =>
          ledger.once({ scope: 'bench', key: `k-${run}-${i}`, fingerprint: 'fp' }, async ({ sql }) => {
            await sql`insert into bench_orders (order_key, amount) values (${`k-${run}-${i}`}, 100)`;
            return { ok: true };
          }),
        );
      });
      rows.push([`bare transaction, c=${concurrency}`, bare.opsPerSecond, bare.p50Ms, bare.p99Ms, '1.00']);
      rows.push([
        `once (claim+write+outcome), c=${concurrency}`,
        keyed.opsPerSecond,
        keyed.p50Ms,
        keyed.p99Ms,
        (keyed.opsPerSecond / bare.opsPerSecond).toFixed(2),
      ]);
    }

    // Replays of completed keys (the last run's keys exist).
    const replay = await medianOf(options.runs, () =>
      measure(options.ops, 1, (i) =>
        ledger.once({ scope: 'bench', key: `k-${prefix}-${i}`, fingerprint: 'fp' }, async () => ({ ok: true })),
      ),
    );
    rows.push(['replay via once, c=1', replay.opsPerSecond, replay.p50Ms, replay.p99Ms, '']);
    const claimReplay = await medianOf(options.runs, () =>
      measure(options.ops, 1, (i) => ledger.claim({ scope: 'bench', key: `k-${prefix}-${i}`, fingerprint: 'fp' })),
    );
    rows.push(['replay via claim (split form), c=1', claimReplay.opsPerSecond, claimReplay.p50Ms, claimReplay.p99Ms, '']);

    statements = 0;
    await countingLedger.claim({ scope: 'bench', key: `k-${prefix}-0`, fingerprint: 'fp' });
    const claimStatements = statements;
    statements = 0;
    await countingLedger.once({ scope: 'bench', key: `k-${prefix}-0`, fingerprint: 'fp' }, async () => ({ ok: true }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const onceStatements = statements;

    printTable(
      `Ledger (${options.ops} ops per run, median of ${options.runs} runs)`,
      ['operation', 'ops/s', 'p50 ms', 'p99 ms', 'vs bare'],
      rows,
    );
    console.log(
      `\nQueries postgres.js ran for one replay: split-form claim ${claimStatements}; once ${onceStatements} ` +
        '(BEGIN and the claim in one round trip; the ROLLBACK is not waited for). ' +
        'The claim is the only statement that touches the ledger.',
    );
  } finally {
    await counting.end();
    await db.close();
    await database.close();
  }
}
