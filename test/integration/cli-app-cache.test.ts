/**
 * The transpile cache of TypeScript app modules (src/cli/app-cache.ts): a
 * module and the app files it imports are transpiled file by file into
 * `.stepkey/cli-cache/` of the app's project, packages staying imported by
 * name (one instance, never inlined); the build is reused while every file it
 * read is unchanged and stepkey's version is the same, and made again when an
 * imported file changes. Each build is imported by a plain `node`, no tsx.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { transpiledAppModule } from '../../src/cli/app-cache.js';
import { TranspileImpossible } from '../../src/cli/app-transpile.js';

const run = promisify(execFile);
const project = mkdtempSync(join(tmpdir(), 'stepkey-cache-'));
afterAll(() => rmSync(project, { recursive: true, force: true }));

function write(path: string, text: string): string {
  const file = join(project, path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, text);
  return file;
}

// No "type": "module": the output is ES modules (.mjs) whatever the app's package says.
write('package.json', JSON.stringify({ name: 'cache-app', private: true }));
write('node_modules/shared-dep/package.json', JSON.stringify({ name: 'shared-dep', type: 'module', exports: './index.js' }));
write('node_modules/shared-dep/index.js', 'export const instance = {};\nglobalThis.sharedDepLoads = (globalThis.sharedDepLoads ?? 0) + 1;\n');
write('node_modules/ts-only/package.json', JSON.stringify({ name: 'ts-only', type: 'module', exports: './index.ts' }));
write('node_modules/ts-only/index.ts', 'export const typed: number = 1;\n');
const entry = write(
  'stepkey.config.ts',
  `import { answer, depOfAnswer } from './src/answer.js';
import { instance } from 'shared-dep';
import data from './src/data.json' with { type: 'json' };
export const same: boolean = instance === depOfAnswer;
export { answer };
export const where = import.meta.url;
export const count = data.count;
`,
);
write(
  'src/answer.ts',
  `import { instance } from 'shared-dep';
import { base } from './base.js';
enum Factor { Two = 2 }
export const answer: number = base * Factor.Two;
export const depOfAnswer = instance;
`,
);
const base = write('src/base.ts', 'export const base: number = 21;\n');
write('src/data.json', '{ "count": 3 }\n');

/** The module imported by a plain node (no tsx, no loader): what it exports. */
async function importPlain(file: string): Promise<{ answer: number; same: boolean; where: string; count: number; loads: number }> {
  const script = 'const m = await import(process.argv[1]); console.log(JSON.stringify({ ...m, loads: globalThis.sharedDepLoads }));';
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script, pathToFileURL(file).href], {
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  return JSON.parse(stdout) as never;
}

describe('the transpile cache of a TypeScript app module', () => {
  it('transpiles each file once, keeps packages external, reuses the build, and sees an edit of an imported file', async () => {
    const first = await transpiledAppModule(entry, { version: '1.0.0' });
    expect(first.built).toBe(true);
    expect(first.file.startsWith(join(project, '.stepkey', 'cli-cache'))).toBe(true);
    expect(await importPlain(first.file)).toEqual({ answer: 42, same: true, where: pathToFileURL(entry).href, count: 3, loads: 1 });
    const answerModule = readFileSync(join(dirname(first.file), 'src', 'answer.ts.mjs'), 'utf8');
    expect(answerModule).toContain('from "shared-dep"');
    expect(answerModule).toContain('from "./base.ts.mjs"');
    expect(answerModule).not.toContain('sharedDepLoads');

    const again = await transpiledAppModule(entry, { version: '1.0.0', loadEsbuild: () => Promise.reject(new Error('esbuild loaded on a hit')) });
    expect(again).toEqual({ file: first.file, built: false });

    writeFileSync(base, 'export const base: number = 50;\n');
    const edited = await transpiledAppModule(entry, { version: '1.0.0' });
    expect(edited.built).toBe(true);
    expect(edited.file).not.toBe(first.file);
    expect((await importPlain(edited.file)).answer).toBe(100);

    const upgraded = await transpiledAppModule(entry, { version: '1.0.1' });
    expect(upgraded.built).toBe(true);
    expect(upgraded.file).not.toBe(edited.file);
    expect((await importPlain(upgraded.file)).answer).toBe(100);
  });

  it('says what it cannot transpile: TypeScript inside node_modules', async () => {
    const other = write('other.config.ts', "import { typed } from 'ts-only';\nexport const workflows = [typed];\n");
    const refused = await transpiledAppModule(other, { version: '1.0.0' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(TranspileImpossible);
    expect((refused as Error).message).toMatch(/ts-only.index\.ts' \(imported by '.*other\.config\.ts'\) is TypeScript inside node_modules/);
  });

  it('reports a syntax error with its place', async () => {
    const broken = write('broken.config.ts', "import { base } from './src/base.js';\nexport const x = ;\n");
    await expect(transpiledAppModule(broken, { version: '1.0.0' })).rejects.toThrow(/broken\.config\.ts:2:\d+: Unexpected ";"/);
  });
});
