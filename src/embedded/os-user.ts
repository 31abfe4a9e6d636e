/**
 * PostgreSQL refuses to run as root. Run as root, the embedded server's
 * initdb and postgres run as the OS user `postgres` (created when missing),
 * and every file they use must be reachable by that user: that is checked
 * here, by asking the system as that user, not by reading mode bits.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { userInfo } from 'node:os';

export interface OsUser {
  uid: number;
  gid: number;
}

export function runningAsRoot(): boolean {
  return userInfo().uid === 0;
}

function idOf(flag: '-u' | '-g'): number | undefined {
  try {
    const value = Number.parseInt(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }), 10);
    return Number.isInteger(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The `postgres` user, created (with its group) if this system has none. */
export function postgresUser(): OsUser {
  let uid = idOf('-u');
  if (uid === undefined) {
    try {
      if (idOf('-g') === undefined) execFileSync('groupadd', ['--system', 'postgres'], { stdio: 'ignore' });
      execFileSync('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres'], {
        stdio: 'ignore',
      });
    } catch (error) {
      throw new Error(
        `PostgreSQL does not run as root, and the OS user 'postgres' could not be created (${(error as Error).message}): ` +
          'create it (useradd --system postgres), run as another user, or set DATABASE_URL',
      );
    }
    uid = idOf('-u');
  }
  const gid = idOf('-g');
  if (uid === undefined || gid === undefined) throw new Error("could not read the uid and gid of the OS user 'postgres'");
  return { uid, gid };
}

/**
 * Whether `user` can reach `path` with the access `test` checks: '-x' (run a
 * file, enter a folder — so every parent folder is searchable too) or '-w'.
 */
export function userCan(user: OsUser, test: '-x' | '-w' | '-r', path: string): boolean {
  const result = spawnSync('test', [test, path], { uid: user.uid, gid: user.gid, stdio: 'ignore' });
  return result.status === 0;
}
