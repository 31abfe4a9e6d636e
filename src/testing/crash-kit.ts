/**
 * The crash kit: proves a workflow exactly-once under SIGKILL.
 *
 * It runs the workflow once without faults (the control), then once per fault
 * point — before each step, right after each step's commit, inside each call
 * step, right after each enqueue, before the run completes, and (with a
 * worker) in a consumer before its commit — each in a child process killed
 * with SIGKILL exactly there. Every killed run is resumed by a retry with its
 * key; worker children deliver effects. Then every effect you name is counted
 * for every key, and every result is compared with the control's.
 *
 *   const report = await crashTest({ scenario: 'test/checkout.crash.ts', databaseUrl, scope: 'acme',
 *     effects: { order: (ref) => countOrders(ref), charge: …, email: … },
 *     compare: (result, control) => … });
 *   expect(report.failures).toEqual([]);
 */
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import postgres from 'postgres';
import type { KeyRef } from '../ledger/types.js';
import { spawnScript, type ChildHandle } from './child-process.js';
import type { CrashScenario } from './scenario.js';

export interface CrashTestOptions {
  /** Path of the scenario module (default export: defineCrashScenario). */
  scenario: string;
  databaseUrl: string;
  scope: string;
  /** Effects to count per run: each must be exactly `expected` (default 1). */
  effects: Record<string, (ref: KeyRef) => Promise<number>>;
  expected?: Record<string, number>;
  /** Whether a run's result matches the control's (default: deep equality). Return a string to explain a mismatch. */
  compare?: (result: unknown, control: unknown, ref: KeyRef) => boolean | string;
  /** Extra fault points, e.g. 'engine.before-step:reserve.v1@2' for the second use of a step. */
  extraFaults?: string[];
  /** Environment of the child processes (service URLs…). Lease and sweep interval default to 1 s and 200 ms. */
  env?: Record<string, string>;
  /** Children run at once (default 4). */
  parallel?: number;
  /** How long a run may take to resume (default 60 s). */
  timeoutMs?: number;
}

export interface FaultOutcome {
  fault: string;
  key: string;
  /** false when the run never reached this point (a step that is not a call has no in-call point). */
  reached: boolean;
  result?: unknown;
  effects: Record<string, number>;
  problems: string[];
}

export interface CrashReport {
  control: unknown;
  outcomes: FaultOutcome[];
  /** One line per broken guarantee: which fault point broke which effect or result. */
  failures: string[];
}

const runner = join(dirname(fileURLToPath(import.meta.url)), `crash-runner${fileURLToPath(import.meta.url).endsWith('.ts') ? '.ts' : '.js'}`);

export async function crashTest(options: CrashTestOptions): Promise<CrashReport> {
  const scenarioPath = resolve(options.scenario);
  const scenario = ((await import(pathToFileURL(scenarioPath).href)) as { default: CrashScenario }).default;
  const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200', ...options.env };
  const timeoutMs = options.timeoutMs ?? 60_000;
  const children: ChildHandle[] = [];
  const spawnChild = (args: string[], faults?: string) => {
    const child = spawnScript(runner, { args: [scenarioPath, ...args], env, ...(faults ? { faults } : {}) });
    children.push(child);
    return child;
  };
  const runToEnd = async (ref: KeyRef, faults?: string) => {
    const child = spawnChild(['run', options.databaseUrl, ref.scope, ref.key], faults);
    const exit = await child.exited;
    const line = /STEPKEY_(RESULT|ERROR) (.*)/.exec(child.output());
    return { exit, line };
  };
  const run = Date.now().toString(36);

  try {
    const workers = (scenario.effects ?? []).length > 0 ? [spawnChild(['worker', options.databaseUrl])] : [];
    await Promise.all(workers.map((worker) => worker.waitFor(/STEPKEY_WORKER_READY/, timeoutMs)));

    const controlRef = { scope: options.scope, key: `crash-control-${run}` };
    const control = await runToEnd(controlRef);
    if (control.line?.[1] !== 'RESULT') throw new Error(`the uninterrupted run failed: ${control.line?.[2] ?? control.exit.code}`);
    const controlResult: unknown = JSON.parse(control.line[2]!);

    const faults = faultPointsOf(scenario, options.extraFaults ?? []);
    const outcomes: FaultOutcome[] = faults.map((fault, i) => ({
      fault,
      key: `crash-${run}-${i}`,
      reached: true,
      effects: {},
      problems: [],
    }));
    await inBatches(outcomes, options.parallel ?? 4, async (outcome) => {
      const ref = { scope: options.scope, key: outcome.key };
      const crashed = await runToEnd(ref, outcome.fault);
      outcome.reached = crashed.exit.signal === 'SIGKILL';
      const resumed = outcome.reached ? await runToEnd(ref) : crashed;
      if (resumed.line?.[1] === 'RESULT') outcome.result = JSON.parse(resumed.line[2]!);
      else outcome.problems.push(`did not complete after the crash: ${resumed.line?.[2] ?? `exit ${resumed.exit.code}`}`);
    });

    // A consumer killed before its commit: another worker must deliver exactly once. The
    // regular workers stop first, so that the doomed one takes the job.
    if ((scenario.effects ?? []).length > 0) {
      for (const worker of workers) worker.kill('SIGTERM');
      await Promise.all(workers.map((worker) => worker.exited));
    }
    for (const effect of scenario.effects ?? []) {
      const fault = `outbox.after-apply:${effect.name}`;
      const outcome: FaultOutcome = { fault, key: `crash-${run}-consumer-${effect.name}`, reached: false, effects: {}, problems: [] };
      const doomed = spawnChild(['worker', options.databaseUrl], fault);
      await doomed.waitFor(/STEPKEY_WORKER_READY/, timeoutMs);
      const finished = await runToEnd({ scope: options.scope, key: outcome.key });
      if (finished.line?.[1] === 'RESULT') outcome.result = JSON.parse(finished.line[2]!);
      const exit = await Promise.race([doomed.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), timeoutMs))]);
      outcome.reached = exit?.signal === 'SIGKILL';
      const rescuer = spawnChild(['worker', options.databaseUrl]);
      await rescuer.waitFor(/STEPKEY_WORKER_READY/, timeoutMs);
      await drained(options.databaseUrl, effect.name, timeoutMs);
      rescuer.kill('SIGTERM');
      await rescuer.exited;
      outcomes.push(outcome);
    }

    const compare = options.compare ?? ((result: unknown, expected: unknown) => isDeepStrictEqual(result, expected));
    const deadline = Date.now() + timeoutMs;
    for (const outcome of outcomes) {
      const ref = { scope: options.scope, key: outcome.key };
      for (const [name, count] of Object.entries(options.effects)) {
        const want = options.expected?.[name] ?? 1;
        let got = await count(ref);
        while (got < want && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 200));
          got = await count(ref);
        }
        outcome.effects[name] = got;
        if (got !== want) outcome.problems.push(`${name}: ${got} (expected ${want})`);
      }
      if (outcome.result !== undefined) {
        const verdict = compare(outcome.result, controlResult, ref);
        if (verdict !== true) outcome.problems.push(`result differs from the uninterrupted run${typeof verdict === 'string' ? `: ${verdict}` : ''}`);
      }
    }
    const failures = outcomes.flatMap((o) => o.problems.map((problem) => `${o.fault}${o.reached ? '' : ' (not reached)'}: ${problem}`));
    return { control: controlResult, outcomes, failures };
  } finally {
    for (const child of children) child.kill('SIGKILL');
  }
}

/** Every boundary of every declared step, and the run's completion. */
export function faultPointsOf(scenario: CrashScenario, extra: string[]): string[] {
  const points: string[] = [];
  for (const declaration of Object.values(scenario.workflow.steps)) {
    points.push(`engine.before-step:${declaration.name}`, `engine.in-call:${declaration.name}`, `engine.after-step-commit:${declaration.name}`);
  }
  for (const effect of scenario.effects ?? []) points.push(`outbox.after-enqueue:${effect.name}`);
  points.push(`engine.before-complete:${scenario.workflow.name}`);
  return [...points, ...extra];
}

/** Waits until no job of `task` is left (the rescuing worker delivered it). */
async function drained(url: string, task: string, timeoutMs: number): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const [row] = await sql`select count(*)::int as n from graphile_worker.jobs where task_identifier = ${task}`;
      if (row!.n === 0) return;
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await sql.end();
  }
}

async function inBatches<T>(items: T[], size: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(size, items.length) }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}
