/**
 * What the CLI's read commands load: `--help`, `runs`, `inspect`, `queues`
 * and `jobs` read the database and load neither graphile-worker nor the app
 * module — not even the ./stepkey.config.ts in the working directory, which
 * the commands that run workflow code use. The CLI runs in a process of its
 * own (`node --import tsx src/cli/main.ts`) with a module hook
 * (module.register) that logs every URL an import resolves to, and every
 * CommonJS module in require's cache when the process exits. A command that
 * does load them (`migrate`: graphile-worker's schema and the app's
 * migrations) shows that the log would see them.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completedCheckout } from '../helpers/cli-fixtures.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const repo = fileURLToPath(new URL('../..', import.meta.url));
const main = join(repo, 'src', 'cli', 'main.ts');
// Inside the repository, so that `--import tsx` resolves from the working directory.
mkdirSync(join(repo, '.stepkey'), { recursive: true });
const dir = mkdtempSync(join(repo, '.stepkey', 'cli-loads-'));
const app = join(dir, 'app');
const marker = join(app, 'loaded');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The hooks (they run on the loader's thread) and the module that registers them.
writeFileSync(
  join(dir, 'hooks.mjs'),
  `import { appendFileSync } from 'node:fs';
let log;
export function initialize(data) { log = data.log; }
export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  appendFileSync(log, resolved.url + '\\n');
  return resolved;
}
`,
);
writeFileSync(
  join(dir, 'register.mjs'),
  `import { appendFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';
import { pathToFileURL } from 'node:url';
const log = process.env.LOADS_LOG;
register(new URL('./hooks.mjs', import.meta.url), { data: { log } });
const require = createRequire(import.meta.url);
process.on('exit', () => {
  appendFileSync(log, Object.keys(require.cache).map((file) => pathToFileURL(file).href + '\\n').join(''));
});
`,
);

// An app in the working directory: its module imports its workflows, and leaves a file when loaded.
mkdirSync(join(app, 'workflows'), { recursive: true });
writeFileSync(join(app, 'workflows', 'index.ts'), 'export const workflows: never[] = [];\n');
writeFileSync(
  join(app, 'stepkey.config.ts'),
  `import { writeFileSync } from 'node:fs';
import { workflows } from './workflows/index.js';
writeFileSync(new URL('./loaded', import.meta.url), 'loaded');
export { workflows };
export const effects = [];
`,
);

interface Loads {
  code: number;
  stdout: string;
  stderr: string;
  urls: string[];
}

let logs = 0;

/** Runs `stepkey …args` in the app's folder; what it printed and every module URL it loaded. */
async function cliLoads(args: string[]): Promise<Loads> {
  const log = join(dir, `loads-${(logs += 1)}.log`);
  writeFileSync(log, '');
  const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve, reject) => {
    execFile(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', '--import', pathToFileURL(join(dir, 'register.mjs')).href, main, ...args],
      { cwd: app, env: { ...process.env, DATABASE_URL: db().url, LOADS_LOG: log }, timeout: PATIENCE_MS },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
        if (code === null) reject(error!);
        else resolve({ code, stdout, stderr });
      },
    );
  });
  return { ...result, urls: [...new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean))] };
}

const appUrl = pathToFileURL(app).href;
const graphileWorker = (urls: string[]) => urls.filter((url) => /\/node_modules\/graphile-worker\//.test(url));
const appFiles = (urls: string[]) =>
  urls.filter((url) => url.startsWith(`${appUrl}/`) || url.startsWith(pathToFileURL(join(repo, 'workflows')).href + '/'));

let key = '';
beforeAll(async () => {
  ({ key } = await completedCheckout(db(), 'acme'));
});

describe('the CLI’s read commands', () => {
  it.each([
    ['--help', ['--help'], /Usage: stepkey/],
    ['runs', ['runs'], /cli-checkout/],
    ['inspect', ['inspect', '<key>'], /reserve\.v1/],
    ['queues', ['queues', '--sample-ms', '1'], /queue/i],
    ['jobs', ['jobs'], /cli\.notify/],
  ] as const)('%s loads neither graphile-worker nor the app module', { timeout: PATIENCE_MS }, async (_, argv, printed) => {
    const ran = await cliLoads(argv.map((arg) => (arg === '<key>' ? key : arg)));
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(printed);
    // The log saw the CLI's own modules and a package it imports.
    expect(ran.urls).toContain(pathToFileURL(main).href);
    expect(ran.urls.some((url) => url.startsWith(pathToFileURL(join(repo, 'src', 'cli', 'commands')).href))).toBe(true);
    expect(graphileWorker(ran.urls)).toEqual([]);
    expect(appFiles(ran.urls)).toEqual([]);
    expect(existsSync(marker)).toBe(false);
  });

  it('would see them: `migrate` loads graphile-worker and the app module', { timeout: PATIENCE_MS }, async () => {
    const ran = await cliLoads(['migrate']);
    expect(ran.code, ran.stderr).toBe(0);
    expect(graphileWorker(ran.urls).length).toBeGreaterThan(0);
    expect(appFiles(ran.urls).length).toBeGreaterThan(0);
    expect(existsSync(marker)).toBe(true);
  });
});
