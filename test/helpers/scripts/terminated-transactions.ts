/**
 * Transactions on one pool while backends are terminated at random, for
 * `ms` milliseconds (and on, on a host too busy to have committed one
 * transaction and lost another by then, until both happened): `workers` loops
 * each begin a Transaction, read txid_current(), sleep a moment, set and roll
 * back to a savepoint, read txid_current() again and commit. Every statement
 * of a transaction must run in that transaction (the same txid throughout);
 * every loop must end once the terminations stop (no query left pending
 * forever; it is given minutes); the process must not die (postgres.js
 * writing to a closed socket).
 *
 *   node --import tsx terminated-transactions.ts <db url> <ms> <workers>
 *   prints RESULT {"committed":…,"failed":…,"interleaved":…,"hung":…}
 */
import postgres from 'postgres';
import { connect } from '../../../src/db/connect.js';
import { Transaction } from '../../../src/db/transaction.js';
import { PATIENCE_MS } from '../patience.js';

const [url, ms, workers] = process.argv.slice(2);
const pool = connect(url!, { max: 8, applicationName: 'terminated-transactions' });
const admin = postgres(url!, { max: 1, onnotice: () => {}, fetch_types: false });
const deadline = Date.now() + Number(ms);
let committed = 0;
let failed = 0;
let interleaved = 0;
const going = () => Date.now() < deadline || ((committed === 0 || failed === 0) && Date.now() < deadline + PATIENCE_MS);

async function loop(): Promise<void> {
  while (going()) {
    let transaction: Transaction | undefined;
    try {
      transaction = await Transaction.begin(pool.sql, { acquireTimeoutMs: 2_000 });
      const [before] = await transaction.sql<{ txid: string }[]>`select txid_current()::text as txid`;
      await transaction.sql`select pg_sleep(${Math.random() * 0.01})`;
      await transaction.sql.unsafe('savepoint a');
      await transaction.sql.unsafe('rollback to savepoint a');
      const [after] = await transaction.sql<{ txid: string }[]>`select txid_current()::text as txid`;
      if (before!.txid !== after!.txid) interleaved += 1;
      await transaction.commit(transaction.sql`select 1`);
      committed += 1;
    } catch {
      transaction?.abandon();
      failed += 1;
    }
  }
}

async function terminate(): Promise<void> {
  while (going()) {
    await new Promise((resolve) => setTimeout(resolve, 20 + Math.random() * 80));
    await admin`
      select pg_terminate_backend(pid) from pg_stat_activity
       where application_name = 'terminated-transactions' and random() < 0.5`.catch(() => {});
  }
}

const loops = Array.from({ length: Number(workers) }, () => loop());
let finished = 0;
for (const running of loops) void running.then(() => (finished += 1));
await terminate();
// Every loop ends once the terminations stop: a transaction waits at most 2 s for a connection,
// and a query whose connection closed is rejected. A loop still running minutes later hangs.
const grace = Date.now() + PATIENCE_MS;
while (finished < loops.length && Date.now() < grace) await new Promise((resolve) => setTimeout(resolve, 100));
console.log(`RESULT ${JSON.stringify({ committed, failed, interleaved, hung: loops.length - finished })}`);
await admin.end();
process.exit(0);
