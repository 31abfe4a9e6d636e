/**
 * The cache of transpiled TypeScript app modules, in `.stepkey/cli-cache/` of
 * the app's project folder (the nearest folder above the module with a
 * package.json, so that packages imported by name resolve from there as they
 * do from the app's files).
 *
 *   entry-<hash of the module's path>.json   the module's last build: stepkey's version and every
 *                                            file it read, with the sha256 of each
 *   <key>/…                                  that build, a .mjs per TypeScript file of the app
 *
 * A build's key is the hash of stepkey's version, the module's path and the
 * content of every file it imports (and of the project's tsconfig.json). A
 * command finds its build by hashing the files its module's last build read:
 * if every one is unchanged, the build is imported as it is, without loading
 * esbuild; if one changed (or was deleted), the module is transpiled again.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sha256, transpileGraph, TranspileImpossible, type EsbuildApi } from './app-transpile.js';

export interface TranspileOptions {
  /** stepkey's version (default: its package.json's): part of every key. */
  version?: string;
  /** How esbuild is loaded (default: stepkey's peer, or the one tsx depends on). */
  loadEsbuild?: () => Promise<EsbuildApi>;
}

export interface CachedModule {
  /** The transpiled entry module, to import. */
  file: string;
  /** false when the cache held it. */
  built: boolean;
}

interface EntryRecord {
  version: string;
  entry: string;
  output: string;
  files: [path: string, hash: string][];
}

const stepkeyRoot = fileURLToPath(new URL('../../', import.meta.url));
/** A build no entry points at any more is removed once it is this old (a command may still be importing it). */
const STALE_BUILD_MS = 60_000;

export function stepkeyVersion(): string {
  return (JSON.parse(readFileSync(join(stepkeyRoot, 'package.json'), 'utf8')) as { version: string }).version;
}

/** The nearest folder at or above `file`'s with a package.json; `file`'s own folder if none has one. */
export function projectRootOf(file: string): string {
  for (let dir = dirname(file); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) return dirname(file);
  }
}

export async function loadEsbuild(): Promise<EsbuildApi> {
  try {
    return (await import('esbuild')) as EsbuildApi;
  } catch {
    // Not beside stepkey: the copy tsx depends on, if tsx is installed.
  }
  try {
    const fromTsx = createRequire(createRequire(import.meta.url).resolve('tsx/package.json')).resolve('esbuild');
    return (await import(pathToFileURL(fromTsx).href)) as EsbuildApi;
  } catch {
    throw new TranspileImpossible('esbuild is not installed', { noEsbuild: true });
  }
}

function keyOf(record: Omit<EntryRecord, 'output'>): string {
  return sha256(JSON.stringify([record.version, record.entry, [...record.files].sort(([a], [b]) => (a < b ? -1 : 1))])).slice(0, 24);
}

function readRecord(path: string): EntryRecord | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as EntryRecord;
  } catch {
    return undefined;
  }
}

function hashOf(file: string): string | undefined {
  try {
    return sha256(readFileSync(file));
  } catch {
    return undefined;
  }
}

/** The transpiled form of the TypeScript module `entry` (an absolute path), from the cache or built now. */
export async function transpiledAppModule(entry: string, options: TranspileOptions = {}): Promise<CachedModule> {
  const version = options.version ?? stepkeyVersion();
  const projectRoot = projectRootOf(entry);
  const cacheRoot = join(projectRoot, '.stepkey', 'cli-cache');
  const recordPath = join(cacheRoot, `entry-${sha256(entry).slice(0, 16)}.json`);

  const record = readRecord(recordPath);
  if (record?.version === version && record.entry === entry && record.files.every(([file, hash]) => hashOf(file) === hash)) {
    const file = join(cacheRoot, keyOf(record), record.output);
    if (existsSync(file)) return { file, built: false };
  }

  const esbuild = await (options.loadEsbuild ?? loadEsbuild)();
  try {
    mkdirSync(cacheRoot, { recursive: true });
  } catch (error) {
    throw new TranspileImpossible(`its cache folder '${cacheRoot}' cannot be made (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  const staging = join(cacheRoot, `.staging-${process.pid}-${Date.now()}`);
  const graph = await transpileGraph(esbuild, entry, {
    projectRoot,
    outDir: staging,
    stepkeyDirs: [join(stepkeyRoot, 'src'), join(stepkeyRoot, 'dist')],
  });
  const files = [...graph.files];
  const tsconfig = join(projectRoot, 'tsconfig.json');
  const tsconfigHash = hashOf(tsconfig);
  if (tsconfigHash !== undefined) files.push([tsconfig, tsconfigHash]);
  const built: EntryRecord = { version, entry, output: graph.entry, files };
  const key = keyOf(built);
  const target = join(cacheRoot, key);

  try {
    for (const module of graph.modules) {
      const path = join(staging, module.path);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, module.code);
      writeFileSync(`${path}.map`, module.map);
    }
    if (!existsSync(target)) {
      try {
        renameSync(staging, target);
      } catch (error) {
        // Another command built the same key meanwhile: theirs is as good.
        if (!existsSync(target)) throw error;
      }
    }
    const recordTemp = `${recordPath}.${process.pid}`;
    writeFileSync(recordTemp, JSON.stringify(built));
    renameSync(recordTemp, recordPath);
  } catch (error) {
    throw new TranspileImpossible(`its cache folder '${cacheRoot}' cannot be written (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  pruneStale(cacheRoot);
  return { file: resolve(target, graph.entry), built: true };
}

/** Removes builds no entry record points at (and stagings left by killed commands) once they are old enough. */
function pruneStale(cacheRoot: string): void {
  try {
    const names = readdirSync(cacheRoot);
    const live = new Set(
      names
        .filter((name) => name.startsWith('entry-') && name.endsWith('.json'))
        .map((name) => readRecord(join(cacheRoot, name)))
        .flatMap((record) => (record ? [keyOf(record)] : [])),
    );
    const now = Date.now();
    for (const name of names) {
      if (name.startsWith('entry-') || live.has(name)) continue;
      const path = join(cacheRoot, name);
      if (now - statSync(path).mtimeMs > STALE_BUILD_MS) rmSync(path, { recursive: true, force: true });
    }
  } catch {
    // Pruning is housekeeping: a concurrent command may have removed what was listed.
  }
}
