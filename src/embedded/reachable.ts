/**
 * A place the OS user `postgres` can reach, for a root process whose project
 * sits in a folder that user cannot enter (a clone under /root, a 0700
 * temporary folder). There, stepkey keeps
 *
 *   <tmp>/stepkey-postgres/<release>/        a copy of the binaries (bin, lib, share), made once per release
 *   <tmp>/stepkey-postgres/data-<hash>/data  the cluster of one project folder (hash of its path)
 *   <tmp>/stepkey-postgres/data-<hash>.origin that folder's path
 *
 * The top folder is root's and writable by root alone (a folder someone else
 * made there first is refused, not trusted). A copy appears by a rename, so a
 * half-made copy is never used. A cluster whose project folder is gone (a
 * temporary clone, removed) is removed the next time a cluster starts here,
 * unless a postgres still runs on it.
 */
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { PostgresBinaries } from './binaries.js';
import { userCan, type OsUser } from './os-user.js';
import { processAlive } from './process-alive.js';

/** The folder under which staged binaries and clusters live, reachable by `user`. */
export function reachableRoot(user: OsUser): string {
  const candidates = [...new Set([tmpdir(), '/tmp', '/var/tmp'])];
  for (const base of candidates) {
    if (!existsSync(base) || !userCan(user, '-x', base)) continue;
    const root = join(base, 'stepkey-postgres');
    if (!existsSync(root)) {
      mkdirSync(root, { mode: 0o755 });
      chmodSync(root, 0o755);
    }
    const stat = lstatSync(root);
    if (!stat.isDirectory() || stat.uid !== 0 || (stat.mode & 0o022) !== 0) {
      throw new Error(`${root} is not a folder that only root can write to; remove it (or set DATABASE_URL)`);
    }
    return root;
  }
  throw new Error(
    `none of ${candidates.join(', ')} can be entered by the OS user 'postgres'; ` +
      "put the project in a folder that user can enter, or set DATABASE_URL",
  );
}

/** Binaries `user` can run: these, or a copy of them under `root`. */
export function reachableBinaries(binaries: PostgresBinaries, user: OsUser, root: () => string): PostgresBinaries {
  if (userCan(user, '-x', binaries.postgres) && userCan(user, '-x', binaries.initdb)) return binaries;
  const staged = join(root(), binaries.release);
  if (!existsSync(join(staged, 'bin', 'postgres'))) {
    const partial = `${staged}.partial-${process.pid}`;
    rmSync(partial, { recursive: true, force: true });
    cpSync(binaries.native, partial, { recursive: true, verbatimSymlinks: true });
    chmodSync(partial, 0o755);
    try {
      renameSync(partial, staged);
    } catch (error) {
      // Another process staged the same release first: use its copy.
      rmSync(partial, { recursive: true, force: true });
      if (!existsSync(join(staged, 'bin', 'postgres'))) throw error;
    }
  }
  return { ...binaries, native: staged, initdb: join(staged, 'bin', 'initdb'), postgres: join(staged, 'bin', 'postgres') };
}

/**
 * The data folder for the cluster of `clusterDir`: `<clusterDir>/data` when
 * `user` can reach it, otherwise one of its own under `root`, owned by `user`.
 */
export function reachableDataDir(clusterDir: string, user: OsUser, root: () => string): string {
  if (userCan(user, '-x', clusterDir)) return join(clusterDir, 'data');
  const origin = resolve(clusterDir);
  const hash = createHash('sha256').update(origin).digest('hex').slice(0, 16);
  const home = join(root(), `data-${hash}`);
  removeOrphans(root());
  writeFileSync(`${home}.origin`, `${origin}\n`);
  mkdirSync(home, { recursive: true, mode: 0o700 });
  chownSync(home, user.uid, user.gid);
  chmodSync(home, 0o700);
  return join(home, 'data');
}

/** Clusters whose project folder no longer exists and on which no postgres runs. */
function removeOrphans(root: string): void {
  for (const entry of readdirSync(root)) {
    if (!entry.endsWith('.origin')) continue;
    const home = join(root, entry.slice(0, -'.origin'.length));
    const origin = readFileSync(join(root, entry), 'utf8').trim();
    if (existsSync(origin)) continue;
    const postmaster = Number.parseInt(readIfThere(join(home, 'data', 'postmaster.pid')).split('\n')[0] ?? '', 10);
    if (Number.isInteger(postmaster) && postmaster > 0 && processAlive(postmaster)) continue;
    rmSync(home, { recursive: true, force: true });
    rmSync(join(root, entry), { force: true });
  }
}

function readIfThere(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
