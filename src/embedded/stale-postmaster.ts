/**
 * Recovery of a cluster whose owner died without stopping it. The owner
 * process writes its pid to `owner.pid`; Postgres writes `postmaster.pid`. If
 * the owner is alive, the cluster is in use and we refuse to touch it. If the
 * owner is gone but its postmaster still runs, we stop that postmaster (by its
 * pid, with a fast shutdown); if the postmaster is gone too, we remove its
 * stale lock file.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { processAlive as alive } from './process-alive.js';

function readPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const pid = Number.parseInt(readFileSync(file, 'utf8').split('\n')[0] ?? '', 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Whether `pid` is a postgres process serving `dataDir` (and not a reused pid). */
function isPostmasterOf(pid: number, dataDir: string): boolean {
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return cmdline.some((arg) => arg.endsWith('postgres')) && cmdline.includes(dataDir);
  } catch {
    // No /proc (macOS): trust the pid file.
    return alive(pid);
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return !alive(pid);
}

export async function stopStalePostmaster(root: string, dataDir: string): Promise<void> {
  const owner = readPid(join(root, 'owner.pid'));
  if (owner !== undefined && owner !== process.pid && alive(owner)) {
    throw new Error(
      `the embedded Postgres in ${root} is in use by process ${owner}; stop that process first or set DATABASE_URL`,
    );
  }
  const lockFile = join(dataDir, 'postmaster.pid');
  const postmaster = readPid(lockFile);
  if (postmaster === undefined) return;
  if (isPostmasterOf(postmaster, dataDir)) {
    process.kill(postmaster, 'SIGINT');
    if (!(await waitForExit(postmaster, 15_000))) {
      throw new Error(`a stale postgres (pid ${postmaster}) for ${dataDir} did not stop within 15 s`);
    }
  }
  rmSync(lockFile, { force: true });
}
