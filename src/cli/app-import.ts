/**
 * Importing the app module. JavaScript is imported as it is. TypeScript is
 * imported as it is where something already loads it (tsx registered, as
 * `npm run stepkey` does; a Node that strips types), and otherwise from the
 * transpile cache (app-cache.ts): transpiled once per change of its files,
 * then imported on every command with no TypeScript tooling loaded at all.
 * Only where that cannot be done (no esbuild; TypeScript inside
 * node_modules; see app-transpile.ts) is it loaded through tsx, saying why on
 * stderr.
 */
import { pathToFileURL } from 'node:url';
import { transpiledAppModule } from './app-cache.js';
import { TranspileImpossible, typescriptFile } from './app-transpile.js';
import { CliFailure } from './errors.js';

/** Node cannot load this TypeScript by itself (Node 20 knows no .ts; later ones strip types but map no './x.js' to x.ts). */
const nativeRefusals = new Set(['ERR_UNKNOWN_FILE_EXTENSION', 'ERR_MODULE_NOT_FOUND', 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX', 'ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING']);

let tsxRegistered = false;

export async function importAppModule(path: string, warn: (text: string) => void): Promise<Record<string, unknown>> {
  const href = pathToFileURL(path).href;
  if (!/\.[cm]?tsx?$/.test(path)) return (await import(href)) as Record<string, unknown>;
  try {
    return (await import(href)) as Record<string, unknown>;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (tsxRegistered || typeof code !== 'string' || !nativeRefusals.has(code)) throw error;
  }
  let impossible = new TranspileImpossible(`'${path}' is CommonJS TypeScript (.cts)`);
  if (typescriptFile.test(path)) {
    try {
      const { file } = await transpiledAppModule(path);
      return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    } catch (error) {
      if (!(error instanceof TranspileImpossible)) throw error;
      impossible = error;
    }
  }
  let tsx: { register: () => unknown };
  try {
    tsx = (await import('tsx/esm/api')) as { register: () => unknown };
  } catch {
    throw new CliFailure(
      'app_module',
      impossible.noEsbuild
        ? `The app module '${path}' is TypeScript, and loading it needs esbuild: npm install --save-dev esbuild (or point --app at compiled JavaScript).`
        : `The app module '${path}' is TypeScript that stepkey cannot transpile file by file (${impossible.message}), and loading ` +
            'it otherwise needs tsx: npm install --save-dev tsx (or point --app at compiled JavaScript).',
    );
  }
  warn(`stepkey: loading the app module through tsx, not the transpile cache: ${impossible.message}.`);
  tsx.register();
  tsxRegistered = true;
  // A fresh URL: Node keeps the failed load of the plain one.
  return (await import(`${href}?stepkey-tsx`)) as Record<string, unknown>;
}
