/**
 * Pools whose first connection has its backend terminated in its first
 * instants (see setup-cut-proxy.ts), one after another. A pool must reject
 * the query caught in that cut and answer the next one; the process must not
 * die of an unhandled rejection.
 *
 *   node --import tsx setup-cut.ts <db url> <pools>   prints SURVIVED <pools> <cuts>
 */
import postgres from 'postgres';
import { connect } from '../../../src/db/connect.js';
import { startSetupCutProxy } from '../setup-cut-proxy.js';

const [url, count] = process.argv.slice(2);
const admin = postgres(url!, { max: 1, onnotice: () => {}, fetch_types: false });
const proxy = await startSetupCutProxy(url!, (pid) => admin`select pg_terminate_backend(${pid})`);
const failures: string[] = [];
for (let i = 0; i < Number(count); i += 1) {
  const pool = connect(proxy.url, { max: 1, applicationName: 'setup-cut' });
  const first = await pool.sql`select 1 as one`.then(
    () => 'answered',
    (error: { code?: string }) => `rejected ${error.code}`,
  );
  if (!first.startsWith('rejected')) failures.push(`pool ${i}: the query caught in the cut was ${first}`);
  // postgres.js's end() waits for a connection closed mid-query until its timeout: do not wait.
  await pool.sql.end({ timeout: 0 });
}
// Cuts done: a pool through the proxy still works once its connections are no longer cut.
await proxy.close();
const healthy = connect(url!, { max: 1 });
const [row] = await healthy.sql<{ ids: number[] }[]>`select array[1, 2]::int4[] as ids`;
await healthy.close();
await admin.end();
if (failures.length > 0 || JSON.stringify(row?.ids) !== '[1,2]') {
  console.log(`FAILED ${failures.join('; ')} ${JSON.stringify(row)}`);
  process.exit(1);
}
console.log(`SURVIVED ${count} ${proxy.cuts}`);
