/**
 * The process that owns the chaos suite's PostgreSQL cluster, across its
 * restarts (postgres-child.ts, which `npm start` uses, ends with its server;
 * this one outlives it). A throwaway cluster in CHAOS_PG_DIR, on one free
 * port kept for every start. It reads commands on stdin and answers on stdout:
 *
 *   (at start)        READY <url> <postmaster pid>
 *   stop fast         SIGINT to the postmaster   → DOWN <ms it took>
 *   stop immediate    SIGQUIT to the postmaster  → DOWN <ms it took>
 *   start             the same cluster, same port → READY <url> <postmaster pid>
 *
 * Any failure is one line `FAILED <message>`. When stdin closes (the suite
 * stopped, or died) it stops the server with a fast shutdown and exits.
 */
import { appendFileSync, chmodSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { locateBinaries } from '../../src/embedded/binaries.js';
import { initCluster, startServer, type ClusterOptions, type RunningServer } from '../../src/embedded/cluster.js';
import { freePort } from '../../src/embedded/free-port.js';
import { postgresUser, runningAsRoot } from '../../src/embedded/os-user.js';
import { reachableBinaries, reachableRoot } from '../../src/embedded/reachable.js';

const PASSWORD = 'chaos';
const report = (line: string) => process.stdout.write(`${line}\n`);
// With the suite gone, its end of stdout is closed: writing there must not kill this process before it stops Postgres.
process.stdout.on('error', () => {});

const root = process.env.CHAOS_PG_DIR;
if (!root) throw new Error('CHAOS_PG_DIR is not set');
const flags = JSON.parse(process.env.CHAOS_PG_FLAGS ?? '[]') as string[];
mkdirSync(root, { recursive: true });
const log = (text: string) => appendFileSync(join(root, 'postgres.log'), text);

const user = runningAsRoot() ? postgresUser() : undefined;
if (user) chmodSync(root, 0o755);
const located = locateBinaries();
const binaries = user ? reachableBinaries(located, user, () => reachableRoot(user)) : located;
const cluster: ClusterOptions = { binaries, dataDir: join(root, 'data'), user, superuser: 'postgres', password: PASSWORD, log };

let port = 0;
let server: RunningServer | undefined;
let exiting = false;

async function start(): Promise<void> {
  server = await startServer(cluster, port, ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...flags]);
  report(`READY postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres ${server.process.pid}`);
}

async function stop(signal: 'SIGINT' | 'SIGQUIT'): Promise<number> {
  const running = server;
  server = undefined;
  if (!running || running.process.exitCode !== null || running.process.signalCode !== null) return 0;
  const began = Date.now();
  const exited = new Promise<void>((resolve) => running.process.once('exit', () => resolve()));
  running.process.kill(signal);
  await exited;
  return Date.now() - began;
}

async function command(line: string): Promise<void> {
  const text = line.trim();
  if (text === 'stop fast' || text === 'stop immediate') {
    report(`DOWN ${await stop(text === 'stop fast' ? 'SIGINT' : 'SIGQUIT')}`);
  } else if (text === 'start') {
    await start();
  } else if (text !== '') {
    report(`FAILED unknown command ${JSON.stringify(text)}`);
  }
}

async function exit(): Promise<void> {
  if (exiting) return;
  exiting = true;
  await stop('SIGINT').catch((error: unknown) => log(`stop failed: ${String(error)}\n`));
  process.exit(0);
}

async function main(): Promise<void> {
  // Commands run one at a time, in order, after the first start; stdin closing (even during it) ends them all.
  let queue = (async () => {
    await initCluster(cluster, ['--encoding=UTF8', '--no-sync']);
    port = await freePort();
    await start();
  })();
  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    queue = queue.then(() => command(line)).catch((error: unknown) => void report(`FAILED ${String(error).replace(/\n/g, ' | ')}`));
  });
  lines.on('close', () => void queue.catch(() => {}).then(exit));
  await queue;
}

main().catch((error: unknown) => {
  report(`FAILED ${(error instanceof Error ? error.message : String(error)).replace(/\n/g, ' | ')}`);
  process.exit(1);
});
