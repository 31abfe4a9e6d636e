/**
 * Owns an embedded Postgres in the given folder and prints `URL <url>`. With
 * --kill-server-owner it SIGKILLs the server's owner process right away (so
 * the postmaster is orphaned) and prints `OWNER KILLED`. Runs until killed.
 */
import { startEmbeddedPostgres } from '../../../src/embedded/start-embedded.js';

const [dir, flag] = process.argv.slice(2) as [string, string | undefined];
const server = await startEmbeddedPostgres({ dir });
console.log(`URL ${server.url}`);
if (flag === '--kill-server-owner') {
  process.kill(server.pid, 'SIGKILL');
  console.log('OWNER KILLED');
}
setInterval(() => {}, 60_000);
