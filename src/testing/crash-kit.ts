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
 * Callees (the services your call steps reach) are declared with whether
 * they dedupe on the step's key. Per fault point the kit reports how many
 * times each callee saw the step's key and what the ledger recorded of those
 * attempts; it fails a point where the callee saw the key more often than
 * the ledger recorded attempts, where the ledger's successful ends are not
 * the callee's successes, and where a callee that cannot dedupe saw a key
 * twice (give the step reconcile, or atMostOnce). A run that stopped for
 * review (atMostOnce) is reported as such, not as a failure.
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
import { childKey, storedRootKey } from '../keys/derive.js';
import type { KeyRef } from '../ledger/types.js';
import { spawnScript, type ChildHandle } from './child-process.js';
import type { CrashScenario } from './scenario.js';

export interface CrashTestOptions {
  /** Path of the scenario module (default export: defineCrashScenario). */
  scenario: string;
  databaseUrl: string;
  scope: string;
  /**
   * Effects to count per run: each must be exactly `expected` (default 1).
   * `run.rootKey` is what the run's step keys derive from (`childKey(run.rootKey, 'charge-card.v1')`).
   */
  effects: Record<string, (run: CountedRun) => Promise<number>>;
  expected?: Record<string, number>;
  /**
   * The callees of your call steps: which step reaches each, whether it
   * dedupes on the step's key, and how often it saw a key (requests) and
   * answered it with success (replays included).
   */
  callees?: Record<string, CalleeSpec>;
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

/** A run whose effects are counted: its scope and key, and the stored root its step keys derive from. */
export interface CountedRun extends KeyRef {
  rootKey: string;
}

export interface CalleeSpec {
  /** The call step that reaches it (its name, e.g. 'charge-card.v1'). */
  step: string;
  /** Whether it dedupes on the key (a repeat gets the first answer and does nothing again). */
  dedupes: boolean;
  /** How many requests with `key` it received, and how many it answered with success. */
  count: (key: string, run: CountedRun) => Promise<{ seen: number; succeeded?: number }>;
}

/** What a callee saw of one run's key, beside what the ledger recorded. */
export interface CalleeCount {
  key: string;
  /** Requests the callee received with the key. */
  seen: number;
  /** Of those, answered with success (when the counter says). */
  succeeded: number | undefined;
  /** Attempts the ledger recorded as started: every one may have reached the callee. */
  started: number;
  /** Attempts the ledger recorded as ended with success. */
  succeededEnds: number;
  /** Attempts whose outcome the ledger does not know. */
  unknown: number;
}

export interface FaultOutcome {
  fault: string;
  key: string;
  /** false when the run never reached this point (a step that is not a call has no in-call point). */
  reached: boolean;
  result?: unknown;
  /** The run stopped for review (an at-most-once call whose outcome is unknown) instead of completing. */
  needsReview?: boolean;
  effects: Record<string, number>;
  /** Per callee: how many times it saw the run's key, and what the ledger recorded. */
  callees: Record<string, CalleeCount>;
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
  const timeoutMs = options.timeoutMs ?? 60_000;
  const env = { STEPKEY_LEASE_MS: '1000', STEPKEY_SWEEP_INTERVAL_MS: '200', STEPKEY_CRASH_PATIENCE_MS: String(timeoutMs), ...options.env };
  const children: ChildHandle[] = [];
  const spawnChild = (args: string[], faults?: string) => {
    const child = spawnScript(runner, { args: [scenarioPath, ...args], env, ...(faults ? { faults } : {}) });
    children.push(child);
    return child;
  };
  const runToEnd = async (ref: KeyRef, faults?: string) => {
    const child = spawnChild(['run', options.databaseUrl, ref.scope, ref.key], faults);
    const exit = await child.exited;
    // 'exit' can come before the child's last line has been read: wait for the line, or for its
    // output to end without one (child-process.ts).
    const line = await child.waitFor(/STEPKEY_(RESULT|ERROR|REVIEW) ?(.*)/, 5_000).catch(() => null);
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
      callees: {},
      problems: [],
    }));
    await inBatches(outcomes, options.parallel ?? 4, async (outcome) => {
      const ref = { scope: options.scope, key: outcome.key };
      const crashed = await runToEnd(ref, outcome.fault);
      outcome.reached = crashed.exit.signal === 'SIGKILL';
      const resumed = outcome.reached ? await runToEnd(ref) : crashed;
      if (resumed.line?.[1] === 'RESULT') outcome.result = JSON.parse(resumed.line[2]!);
      else if (resumed.line?.[1] === 'REVIEW') outcome.needsReview = true;
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
      const outcome: FaultOutcome = { fault, key: `crash-${run}-consumer-${effect.name}`, reached: false, effects: {}, callees: {}, problems: [] };
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
      const ref = { scope: options.scope, key: outcome.key, rootKey: await storedRoot(options.databaseUrl, options.scope, outcome.key) };
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
      for (const [name, callee] of Object.entries(options.callees ?? {})) {
        const count = await calleeCount(options.databaseUrl, ref, callee);
        outcome.callees[name] = count;
        const where = `${name} (step ${callee.step}, key ${count.key})`;
        if (count.seen > count.started) {
          outcome.problems.push(`${where} saw the key ${count.seen} times, the ledger records ${count.started} attempts`);
        }
        // An answer lost with the process (killed after the callee answered) is the one success the ledger cannot end.
        if (count.succeeded !== undefined && !outcome.fault.startsWith('engine.in-call') && count.succeededEnds !== count.succeeded) {
          outcome.problems.push(`${where} answered ${count.succeeded} successes, the ledger ended ${count.succeededEnds} attempts with success`);
        }
        if (!callee.dedupes && count.seen > 1) {
          outcome.problems.push(
            `${where} does not dedupe and saw the key ${count.seen} times: give step '${callee.step}' a reconcile, or atMostOnce`,
          );
        }
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
    points.push(
      `engine.before-step:${declaration.name}`,
      `engine.before-call:${declaration.name}`,
      `engine.in-call:${declaration.name}`,
      `engine.after-step-commit:${declaration.name}`,
    );
  }
  for (const effect of scenario.effects ?? []) points.push(`outbox.after-enqueue:${effect.name}`);
  points.push(`engine.before-complete:${scenario.workflow.name}`);
  return [...points, ...extra];
}

/** What a callee saw of the run's key for its step, beside the ledger's record of that step's attempts. */
async function calleeCount(url: string, run: CountedRun, callee: CalleeSpec): Promise<CalleeCount> {
  const key = childKey(run.rootKey, callee.step);
  const { seen, succeeded } = await callee.count(key, run);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ started: number; ok: number; unknown: number }[]>`
      select count(*)::int as started, (count(*) filter (where outcome = 'ok'))::int as ok,
             (count(*) filter (where outcome is null or outcome = 'unknown'))::int as unknown
        from stepkey.step_attempts
       where scope = ${run.scope} and run_key = ${run.key} and (step = ${callee.step} or step like ${`${callee.step}[%`})`;
    return { key, seen, succeeded, started: row?.started ?? 0, succeededEnds: row?.ok ?? 0, unknown: row?.unknown ?? 0 };
  } finally {
    await sql.end();
  }
}

/** The root a run's keys derive from, as its row stored it. */
async function storedRoot(url: string, scope: string, key: string): Promise<string> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ root: string | null }[]>`select root_key as root from stepkey.ledger where scope = ${scope} and key = ${key}`;
    return storedRootKey(scope, key, row?.root);
  } finally {
    await sql.end();
  }
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
