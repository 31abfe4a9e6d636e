/**
 * Runs one `once` call that writes a business row, in its own process, so a
 * test can kill it at a fault point (STEPKEY_FAULTS). Prints `DONE <state>`.
 * Arguments: database URL, scope, key.
 */
import { connect } from '../../../src/db/connect.js';
import { Ledger } from '../../../src/ledger/ledger.js';

const [url, scope, key] = process.argv.slice(2) as [string, string, string];
const database = connect(url, { max: 2 });
const ledger = new Ledger({ sql: database.sql });
const result = await ledger.once({ scope, key, fingerprint: 'fp', name: 'orders.create' }, async ({ sql }) => {
  await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
  return { orderKey: key };
});
console.log(`DONE ${result.state}`);
await database.close();
