/**
 * A service for the supervisor's tests: an HTTP server on a free port whose
 * /health answers 200, announced with `LISTENING <url>`; it stops on SIGTERM,
 * and when its supervisor's pipe closes (as the example's services do).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { onStop } from '../../../workflows/lib/service.js';

const server = createServer((req, res) => {
  res.writeHead(req.url === '/health' ? 200 : 404).end();
});
server.listen(0, '127.0.0.1', () => {
  console.log(`LISTENING http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});
onStop(() => new Promise<void>((resolve) => server.close(() => resolve())));
