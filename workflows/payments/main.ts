/** The payment stand-in as a process of its own, on PAYMENTS_PORT. */
import { connect } from 'stepkey';
import { config, databaseUrl } from '../config.js';
import { onStop } from '../lib/service.js';
import { startPaymentService } from './service.js';

const database = connect(databaseUrl(), { max: 10, applicationName: 'payments' });
const service = await startPaymentService({ database, port: config.paymentsPort, admin: true });
console.log(`LISTENING ${service.url}`);

onStop(async () => {
  await service.close();
  await database.close();
});
