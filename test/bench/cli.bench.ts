/**
 * `npm run bench -- cli`: what a command of the CLI costs — CPU (user +
 * system, the process and everything it starts, from GNU time) and wall time
 * — beside `node -e 0`, medians of BENCH_CLI_REPS repetitions (default 7).
 * The built CLI (`node dist/cli/main.js`, built first if dist/ is not a build
 * of the sources as they are) against a database with runs, a queued run and
 * a job; the TypeScript app module (workflows/stepkey.config.ts) from the
 * transpile cache and, cold, transpiled again; then the same commands through
 * `npm run stepkey` (tsx, from source), for comparison.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine } from '../../src/engine/engine.js';
import { benchDatabase, printTable } from './harness.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const time = '/usr/bin/time';

const note = defineEffect({ name: 'bench-cli.note', payload: z.object({ n: z.number() }), async handler() {} });
const order = defineWorkflow({
  name: 'bench-cli-order',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { reserve: step('reserve.v1'), charge: step('charge.v1'), confirm: step('confirm.v1') },
  async run({ input, steps }) {
    await steps.reserve.tx(async () => input.n);
    await steps.charge.call(async ({ key }) => key.slice(0, 8));
    await steps.confirm.enqueue(note, { n: input.n });
    return input.n;
  },
});
const reports = defineQueue({ name: 'bench-cli-reports', concurrency: 1 });

interface Sample {
  wallMs: number;
  cpuMs: number;
}

/** One run of `command args…` under GNU time: its wall time (measured here) and CPU (user + system). */
function once(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<Sample> {
  const out = join(mkdtempSync(join(tmpdir(), 'stepkey-bench-cli-')), 'time');
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(time, ['-f', '%U %S', '-o', out, command, ...args], { cwd: repo, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.once('exit', (code) => {
      const wallMs = performance.now() - started;
      const [user, system] = readFileSync(out, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
      rmSync(join(out, '..'), { recursive: true, force: true });
      if (code !== 0) reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr}`));
      else resolve({ wallMs, cpuMs: (user! + system!) * 1000 });
    });
  });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function measure(reps: number, command: string, args: string[], env: NodeJS.ProcessEnv, before?: () => void): Promise<Sample> {
  const samples: Sample[] = [];
  for (let rep = 0; rep < reps; rep += 1) {
    before?.();
    samples.push(await once(command, args, env));
  }
  return { wallMs: median(samples.map((s) => s.wallMs)), cpuMs: median(samples.map((s) => s.cpuMs)) };
}

async function seed(url: string): Promise<{ key: string }> {
  const database = connect(url, { max: 4 });
  const engine = createEngine({ database, workflows: [order], queues: [reports], logger: false, onError: () => {} });
  let key = '';
  for (let n = 0; n < 40; n += 1) {
    key = `order-${n}`;
    await engine.run(order, { scope: `tenant-${n % 4}`, key }, { n });
  }
  // One run waiting on the queue (not due for an hour), so that `queues` has a row to show.
  await engine.enqueue(order, { scope: 'tenant-0', key: 'queued-0' }, { n: -1 }, { queue: reports, delayMs: 3_600_000 });
  await engine.shutdown();
  await database.close();
  return { key };
}

export async function cliBench(): Promise<void> {
  if (!existsSync(time)) {
    console.error(`the cli benchmark needs GNU time at ${time} (apt-get install time)`);
    process.exitCode = 2;
    return;
  }
  const reps = Number(process.env.BENCH_CLI_REPS ?? 7);
  try {
    execFileSync(process.execPath, ['.ci/dist-stamp.mjs', 'fresh'], { cwd: repo, stdio: 'ignore' });
  } catch {
    console.log('dist/ is not a build of the sources as they are: npm run build');
    execFileSync('npm', ['run', '-s', 'build'], { cwd: repo, stdio: 'inherit' });
  }
  const bench = await benchDatabase();
  try {
    const { key } = await seed(bench.url);
    // A newcomer's shell: no source condition, the database in DATABASE_URL.
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', DATABASE_URL: bench.url };
    const cli = ['dist/cli/main.js'];
    const app = ['--app', 'workflows/stepkey.config.ts', '--manifest', 'workflows/stepkey.manifest.json', '--offline'];
    const commands: [string, string[]][] = [
      ['--help', ['--help']],
      ['runs', ['runs']],
      [`inspect ${key}`, ['inspect', key]],
      ['queues (samples rates for 1 s)', ['queues']],
      ['queues --sample-ms 1', ['queues', '--sample-ms', '1']],
      ['jobs', ['jobs']],
    ];
    const cache = join(repo, '.stepkey', 'cli-cache');
    const rows: (string | number)[][] = [];
    const add = (label: string, sample: Sample) => rows.push([label, sample.cpuMs, sample.wallMs]);

    add('node -e 0', await measure(reps, process.execPath, ['-e', '0'], env));
    for (const [label, args] of commands) add(`node dist/cli/main.js ${label}`, await measure(reps, process.execPath, [...cli, ...args], env));
    await once(process.execPath, [...cli, 'check', ...app], env);
    add('node dist/cli/main.js check (TypeScript app, cached)', await measure(reps, process.execPath, [...cli, 'check', ...app], env));
    add(
      'node dist/cli/main.js check (TypeScript app, transpiled)',
      await measure(reps, process.execPath, [...cli, 'check', ...app], env, () => rmSync(cache, { recursive: true, force: true })),
    );
    for (const [label, args] of [commands[0]!, commands[1]!]) {
      add(`npm run -s stepkey -- ${label} (tsx, source)`, await measure(Math.min(reps, 3), 'npm', ['run', '-s', 'stepkey', '--', ...args], env));
    }
    printTable(`The CLI: CPU and wall per command, medians of ${reps} (npm rows: of ${Math.min(reps, 3)})`, ['command', 'CPU ms', 'wall ms'], rows);
  } finally {
    await bench.close();
  }
}
