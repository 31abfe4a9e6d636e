/**
 * One PostgreSQL cluster driven directly: `initdb` once, then `postgres` as a
 * child process of the caller (its owner, see postgres-child.ts), run as
 * `user` when the caller is root. Readiness is read from the server's log
 * (`lc_messages=C`, so the text is known); a fast shutdown is SIGINT.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PostgresBinaries } from './binaries.js';
import type { OsUser } from './os-user.js';

export interface ClusterOptions {
  binaries: PostgresBinaries;
  dataDir: string;
  /** Set when running as root: initdb and postgres run as this user. */
  user: OsUser | undefined;
  superuser: string;
  password: string;
  log: (text: string) => void;
}

const env = () => ({ ...process.env, LC_MESSAGES: 'C' });

function run(file: string, args: string[], options: ClusterOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { ...(options.user ?? {}), env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      options.log(chunk.toString('utf8'));
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', reject);
    child.once('close', (code, signal) =>
      code === 0 ? resolve(output) : reject(new Error(`${file} failed (code ${code}, signal ${signal}): ${output.trim().split('\n').slice(-5).join(' | ')}`)),
    );
  });
}

/** Creates the cluster in `dataDir` (which must not hold one yet). */
export async function initCluster(options: ClusterOptions, initdbFlags: string[]): Promise<void> {
  const { dataDir, user } = options;
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (user) chownSync(dataDir, user.uid, user.gid);
  // The password travels in a file next to the data folder, readable by the server's user alone.
  const passwordFile = join(dirname(dataDir), `.pwfile-${randomBytes(6).toString('hex')}`);
  writeFileSync(passwordFile, `${options.password}\n`, { mode: 0o600 });
  if (user) chownSync(passwordFile, user.uid, user.gid);
  try {
    await run(
      options.binaries.initdb,
      [
        `--pgdata=${dataDir}`,
        '--auth=scram-sha-256',
        `--username=${options.superuser}`,
        `--pwfile=${passwordFile}`,
        '--lc-messages=C',
        ...initdbFlags,
      ],
      options,
    );
  } finally {
    rmSync(passwordFile, { force: true });
  }
}

export interface RunningServer {
  readonly process: ChildProcess;
  /** Fast shutdown (SIGINT); resolves when the server has exited. */
  stop(): Promise<void>;
}

/** Starts the server on `port` and resolves once it accepts connections. */
export function startServer(options: ClusterOptions, port: number, flags: string[]): Promise<RunningServer> {
  const child = spawn(
    options.binaries.postgres,
    ['-D', options.dataDir, '-p', String(port), '-c', 'lc_messages=C', ...flags],
    { ...(options.user ?? {}), env: env(), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const server: RunningServer = {
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGINT');
      await exited;
    },
  };
  return new Promise((resolve, reject) => {
    let ready = false;
    const watch = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      options.log(text);
      if (!ready && text.includes('database system is ready to accept connections')) {
        ready = true;
        resolve(server);
      }
    };
    child.stdout.on('data', (chunk: Buffer) => options.log(chunk.toString('utf8')));
    child.stderr.on('data', watch);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      if (!ready) reject(new Error(`postgres exited (code ${code}, signal ${signal}) before it was ready`));
    });
  });
}
