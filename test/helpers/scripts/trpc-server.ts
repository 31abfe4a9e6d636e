/**
 * The test tRPC app in a process of its own, for crash tests.
 *   node --import tsx trpc-server.ts <db url>   prints URL <base url>
 */
import { connect } from '../../../src/db/connect.js';
import { Ledger } from '../../../src/ledger/ledger.js';
import { createEngine } from '../../../src/engine/engine.js';
import { buildApp, listen, placeOrder } from '../trpc-app.js';

const [url] = process.argv.slice(2) as [string];
const database = connect(url, { max: 10 });
const engine = createEngine({ database, workflows: [placeOrder], onError: () => {} });
const app = buildApp(new Ledger({ sql: database.sql }), engine);
console.log(`URL ${await listen(app.server)}`);
