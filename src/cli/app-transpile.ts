/**
 * Transpiling a TypeScript app module for Node, file by file, with esbuild.
 * Every TypeScript file of the app that the module reaches through relative
 * imports (or tsconfig `paths`) becomes one ES module of its own, its imports
 * rewritten to point at its neighbours in the output; packages stay external,
 * imported by name, so that the app's stepkey, zod and drizzle are the very
 * modules the CLI runs with — never a second copy inlined. A JSON file is
 * inlined into the module that imports it; a JavaScript file of the app is
 * imported from where it is.
 *
 * What cannot be done this way is refused with TranspileImpossible (the
 * caller then falls back to tsx): a TypeScript file inside node_modules, a
 * CommonJS TypeScript file (.cts), stepkey's own source.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isBuiltin } from 'node:module';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Esbuild from 'esbuild';

export type EsbuildApi = Pick<typeof Esbuild, 'build' | 'version'>;

/** The app module cannot be transpiled file by file; the message says why. */
export class TranspileImpossible extends Error {
  override readonly name = 'TranspileImpossible';
  /** Nothing to transpile with: neither stepkey's esbuild peer nor tsx's is installed. */
  readonly noEsbuild: boolean;

  constructor(message: string, options: { noEsbuild?: boolean } = {}) {
    super(message);
    this.noEsbuild = options.noEsbuild ?? false;
  }
}

export interface TranspileLayout {
  /** The app's project folder (its package.json's): output paths mirror the files' paths below it. */
  projectRoot: string;
  /** Where the output will live: the files' imports are written relative to it. */
  outDir: string;
  /** Folders whose TypeScript is stepkey's own (its src/ and dist/ when run from a clone). */
  stepkeyDirs: readonly string[];
}

export interface TranspiledModule {
  /** Output path, relative to outDir. */
  path: string;
  code: string;
  map: string;
}

export interface TranspiledGraph {
  /** The output path of the entry, relative to outDir. */
  entry: string;
  /** Every file read (TypeScript and inlined JSON) with the sha256 of its content. */
  files: Map<string, string>;
  modules: TranspiledModule[];
}

export const typescriptFile = /\.(ts|mts|tsx)$/;
const loadedFile = /\.(ts|mts|tsx|json)$/;
const fromHere = Symbol('stepkey: resolving for the rewrite');

export function sha256(content: string | Buffer): string {
  return createHash('sha256').update(content).digest('hex');
}

/** Where a source file's module goes below outDir: its path under the project, '..' spelled '_up_', plus .mjs. */
export function outputPathOf(projectRoot: string, source: string): string {
  const parts = relative(projectRoot, source)
    .split(sep)
    .map((part) => (part === '..' ? '_up_' : part));
  return `${parts.join('/')}.mjs`;
}

function specifierBetween(fromOutput: string, toOutput: string): string {
  const path = relative(dirname(fromOutput), toOutput).split(sep).join('/');
  return path.startsWith('.') ? path : `./${path}`;
}

function isInside(dir: string, file: string): boolean {
  const path = relative(dir, file);
  return path !== '' && !path.startsWith('..') && !isAbsolute(path);
}

/** Transpiles `entry` and every TypeScript file of the app it imports, one esbuild build per file. */
export async function transpileGraph(esbuild: EsbuildApi, entry: string, layout: TranspileLayout): Promise<TranspiledGraph> {
  const files = new Map<string, string>();
  const modules: TranspiledModule[] = [];
  const queued = new Set<string>([entry]);
  let wave = [entry];
  let next: string[] = [];
  /** Why a file cannot be transpiled here (set by the resolver, thrown once its build has stopped). */
  let impossible: string | undefined;

  const whyNot = (file: string, importer: string): string | undefined => {
    const where = `'${file}' (imported by '${importer}')`;
    if (file.split(sep).includes('node_modules')) return `${where} is TypeScript inside node_modules`;
    if (file.endsWith('.cts')) return `${where} is CommonJS TypeScript (.cts)`;
    if (layout.stepkeyDirs.some((dir) => isInside(dir, file))) return `${where} is stepkey's own source`;
    return undefined;
  };

  const transpileOne = async (source: string): Promise<void> => {
    const out = outputPathOf(layout.projectRoot, source);
    const url = pathToFileURL(source).href;
    const plugin: Esbuild.Plugin = {
      name: 'stepkey-app-imports',
      setup(build) {
        build.onResolve({ filter: /.*/ }, async (args) => {
          if (args.kind === 'entry-point' || args.pluginData === fromHere) return undefined;
          if (isBuiltin(args.path)) return { path: args.path, external: true };
          const bare = !/^(\.|\/|file:)/.test(args.path) && !isAbsolute(args.path);
          const found = await build.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, importer: args.importer, pluginData: fromHere });
          if (found.errors.length > 0 || found.external) {
            // Left to Node, which says what is missing (or a dynamic import's catch handles it).
            return { path: bare ? args.path : pathToFileURL(resolve(args.resolveDir, args.path)).href, external: true };
          }
          const target = found.path;
          if (target.endsWith('.json')) return { path: target };
          if (typescriptFile.test(target) || target.endsWith('.cts')) {
            const refused = whyNot(target, args.importer);
            if (refused !== undefined) {
              impossible ??= refused;
              return { errors: [{ text: refused }] };
            }
            if (!queued.has(target)) {
              queued.add(target);
              next.push(target);
            }
            return { path: specifierBetween(out, outputPathOf(layout.projectRoot, target)), external: true };
          }
          if (bare) {
            // Kept by name when Node, resolving it from the output, finds the same file (the usual case).
            const fromRoot = await build.resolve(args.path, { kind: args.kind, resolveDir: layout.projectRoot, pluginData: fromHere });
            if (fromRoot.errors.length === 0 && fromRoot.path === target) return { path: args.path, external: true };
          }
          return { path: pathToFileURL(target).href, external: true };
        });
        build.onLoad({ filter: loadedFile }, async (args) => {
          const contents = await readFile(args.path);
          files.set(args.path, sha256(contents));
          const loader = args.path.endsWith('.json') ? 'json' : args.path.endsWith('.tsx') ? 'tsx' : 'ts';
          return { contents, loader, resolveDir: dirname(args.path) };
        });
      },
    };
    const result = await esbuild.build({
      entryPoints: [source],
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'node',
      target: 'node20.12',
      // Node's resolution: no 'module' condition or field.
      conditions: [],
      mainFields: ['main'],
      outfile: resolve(layout.outDir, out),
      sourcemap: 'external',
      sourcesContent: false,
      logLevel: 'silent',
      // The module runs from the cache; it sees its own location as the source file's.
      define: {
        'import.meta.url': JSON.stringify(url),
        'import.meta.filename': JSON.stringify(source),
        'import.meta.dirname': JSON.stringify(dirname(source)),
      },
      plugins: [plugin],
    }).catch((error: unknown) => {
      if (impossible !== undefined) throw new TranspileImpossible(impossible);
      throw buildError(error);
    });
    const code = result.outputFiles.find((file) => file.path.endsWith('.mjs'))?.text;
    const map = result.outputFiles.find((file) => file.path.endsWith('.map'))?.text;
    if (code === undefined || map === undefined) throw new Error(`esbuild gave no output for '${source}'.`);
    modules.push({ path: out, code, map });
  };

  while (wave.length > 0) {
    next = [];
    await Promise.all(wave.map(transpileOne));
    wave = next;
  }
  return { entry: outputPathOf(layout.projectRoot, entry), files, modules };
}

/** esbuild's failure as one line: the first error with its place (`src/checkout.ts:12:3: Expected ";"`). */
function buildError(error: unknown): Error {
  const first = (error as { errors?: Esbuild.Message[] }).errors?.[0];
  if (!first) return error instanceof Error ? error : new Error(String(error));
  const place = first.location ? `${first.location.file}:${first.location.line}:${first.location.column + 1}: ` : '';
  return new Error(`${place}${first.text}`);
}
