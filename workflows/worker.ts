/** The shop's worker process: confirmation emails, crash recovery of checkouts, purging. */
import { connect } from '../src/db/connect.js';
import { runWorker } from '../src/worker/run-worker.js';
import { checkout } from './checkout.js';
import { databaseUrl } from './config.js';
import { sendConfirmation } from './effects.js';
import { onStop } from './lib/service.js';

const database = connect(databaseUrl(), { max: 20, applicationName: 'shop-worker' });
const worker = await runWorker({ database, workflows: [checkout], effects: [sendConfirmation], concurrency: 10 });
console.log(`READY worker pool ${worker.poolId}`);

onStop(async () => {
  await worker.stop();
  await database.close();
});
