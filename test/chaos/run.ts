/**
 * `npm run chaos`: the example shop (API, worker, payment stand-in) under
 * continuous keyed load, on a PostgreSQL cluster of its own, while a seeded
 * plan of faults is done to the database — restarts with fast and immediate
 * shutdowns, backends terminated, the connection limit held. Then, once the
 * app has had 30 s (and up to 60 s) after the last fault to catch up, it
 * checks: every key one order, one charge, one email; no run left in
 * progress; no job locked; no process crashed or left behind; no 5xx that
 * quotes the driver, SQL or the caller's data, and every 503 with
 * Retry-After. Exit 0 when all hold, 1 with a report otherwise.
 *
 *   npm run chaos [-- --seed N] [--faults-ms 80000] [--clients 6] [--keep]
 *
 * The seed (printed first) replays the same fault plan; the load's timing is
 * the machine's. Logs of every process are in the run's folder, kept when a
 * check fails (or with --keep).
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '../../src/db/connect.js';
import { processAlive } from '../../src/embedded/process-alive.js';
import { startApp } from './app.js';
import { killGroup, type Child } from './child.js';
import { startCluster } from './cluster.js';
import { startChild } from './child.js';
import { inject, type FaultDone } from './faults.js';
import { checkKeys, keyFailures, readTotals, settled } from './invariants.js';
import { startLoad } from './load.js';
import { describeFault, planFaults } from './plan.js';
import { freshSeed, prng } from './prng.js';
import { leftovers } from './processes.js';
import { printFigures } from './report.js';
import { describeProcessFault, freeze, planProcessFaults, startHog, type ProcessFault } from './process-faults.js';
import { freezeEnd, freezeStart, judgeFreeze } from './freeze-check.js';
import { EVENTS_PER_RUN, SENDER_RUNS, type SenderFinal } from './sender-load.js';
import { senderFailures } from './sender-checks.js';

const projectRoot = fileURLToPath(new URL('../..', import.meta.url));
const arg = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 ? process.argv[at + 1] : undefined;
};
const seed = arg('seed') !== undefined ? Number(arg('seed')) : freshSeed();
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed takes a non-negative integer, not ${arg('seed')}`);
const faultWindowMs = Number(arg('faults-ms') ?? 80_000);
const clients = Number(arg('clients') ?? 6);
const keep = process.argv.includes('--keep');
/** The app has at least this long after the last fault before the checks, and at most `settleCapMs`. */
const settleMinMs = 30_000;
const settleCapMs = 120_000;

const log = (message: string) => console.log(`chaos: ${message}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A check that does not answer within `ms` fails instead of holding the run. */
const within = <T>(ms: number, what: string, work: Promise<T>) =>
  Promise.race([work, sleep(ms).then(() => Promise.reject(new Error(`${what} did not answer within ${ms} ms`)))]);
const began = Date.now();
const since = () => `${((Date.now() - began) / 1000).toFixed(1)} s`;

log(`seed ${seed} (replay: npm run chaos -- --seed ${seed})`);
const random = prng(seed);
const plan = planFaults(random, faultWindowMs);
log(`fault plan over ${faultWindowMs / 1000} s: ${plan.map(describeFault).join('; ')}`);
// The process faults draw from a stream of their own: the seed replays the same database faults as before they existed.
const processPlan = planProcessFaults(prng(seed ^ 0x5bd1e995), faultWindowMs, plan);
log(`process faults: ${processPlan.map(describeProcessFault).join('; ')}`);

const dir = mkdtempSync(join(tmpdir(), 'stepkey-chaos-'));
// As root, PostgreSQL runs as the OS user postgres, which must enter this folder.
chmodSync(dir, 0o755);
const children: Child[] = [];
const failures: string[] = [];

// Interrupted (Ctrl-C, or CI's timeout): every process started here goes, by its group.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: killing every process started here (logs in ${dir})`);
    for (const child of children) killGroup(child.pid);
    process.exit(130);
  });
}

const api = (services: Child[]) => services.find((service) => service.name === 'api')!;

/**
 * Does the process faults at their times, beside the database faults. A freeze
 * must not stop the app: work that was due or queued goes on meanwhile — the
 * sender's runs consume their events, the runs the frozen API held are taken
 * over, due jobs are taken (freeze-check.ts) — read just after the API stopped
 * and just before it continues.
 */
async function runProcessFaults(faults: ProcessFault[], began: number, databaseUrl: string, apiPid: number): Promise<string[]> {
  const report: string[] = [];
  const { sql, close } = connect(databaseUrl, { max: 1, applicationName: 'chaos-checker' });
  /** A read retried through a short database fault until `untilMs` (then its error). */
  const reading = async <T>(read: () => Promise<T>, untilMs: number): Promise<T> => {
    for (;;) {
      try {
        return await read();
      } catch (error) {
        if (Date.now() >= untilMs) throw error;
        await sleep(500);
      }
    }
  };
  try {
    await Promise.all(
      faults.map(async (fault) => {
        await sleep(began + fault.atMs - Date.now());
        if (fault.kind === 'hog') {
          const hog = startHog();
          await sleep(fault.holdMs);
          hog.stop();
          report.push(`${describeProcessFault(fault)}: busy loops ${hog.pids.join(', ')} ran and were stopped`);
          return;
        }
        const verdict = await freeze(apiPid, fault.holdMs, async (endsAt) => {
          const start = await reading(() => freezeStart(sql), endsAt - 3_000);
          await sleep(endsAt - Date.now());
          // Read before SIGCONT, however long a database fault delays it (a little past the hold).
          return judgeFreeze(start, await reading(() => freezeEnd(sql, start), endsAt + 15_000), describeProcessFault(fault));
        });
        report.push(`${describeProcessFault(fault)}: ${verdict.summary}`);
        failures.push(...verdict.failures);
      }),
    );
  } catch (error) {
    failures.push(`a process fault could not be done: ${(error as Error).message}`);
  } finally {
    await close();
  }
  return report;
}

async function main(): Promise<number> {
  const cluster = await startCluster(join(dir, 'pg'), projectRoot, began);
  children.push(cluster.owner);
  log(`${since()} PostgreSQL up (postmaster ${cluster.postmasterPid()}, ${cluster.url.replace(/:[^:@/]+@/, ':***@')}), data in ${dir}/pg`);
  const app = await startApp(cluster.url, dir, projectRoot, began);
  children.push(...app.services);
  log(`${since()} the shop is up: API ${app.apiUrl}, payments ${app.paymentsUrl}; ${app.services.map((s) => `${s.name} ${s.pid}`).join(', ')}`);
  const sender = startChild('sender', 'test/chaos/sender.ts', {
    cwd: projectRoot,
    env: { CHAOS_DATABASE_URL: app.databaseUrl, CHAOS_SEND_WINDOW_MS: String(faultWindowMs) },
    logFile: join(dir, 'sender.log'),
    began,
  });
  children.push(sender);
  await sender.line(/^READY$/, 120_000);
  log(`${since()} the event sender is up (pid ${sender.pid}): ${SENDER_RUNS} runs waiting for ${EVENTS_PER_RUN} events each`);
  for (const child of children) {
    void child.exited.then((exit) => {
      if (!exit.asked) failures.push(`${child.name} (pid ${child.pid}) died at ${(exit.atMs / 1000).toFixed(1)} s (code ${exit.code}, signal ${exit.signal}): ${child.tail().slice(-3).join(' | ')}`);
    });
  }

  let deadline = Number.POSITIVE_INFINITY;
  const load = startLoad({ apiUrl: app.apiUrl, clients, seed, deadline: () => deadline });
  const faultsBegan = Date.now();
  const processFaults = runProcessFaults(processPlan, faultsBegan, app.databaseUrl, api(app.services).pid);
  const done: FaultDone[] = [];
  for (const fault of plan) {
    await sleep(faultsBegan + fault.atMs - Date.now());
    const startedMs = Date.now() - faultsBegan;
    try {
      const detail = await inject(fault, cluster, cluster.url, random);
      done.push({ fault, startedMs, endedMs: Date.now() - faultsBegan, detail });
      log(`${since()} ${fault.kind}: ${detail}`);
    } catch (error) {
      failures.push(`the fault ${describeFault(fault)} could not be done: ${(error as Error).message}`);
      log(`${since()} ${fault.kind} FAILED: ${(error as Error).message}`);
      if (fault.kind.startsWith('restart')) break; // Without its database the rest means nothing.
    }
  }
  const processDone = await processFaults;
  const lastFault = Date.now();
  deadline = lastFault + settleCapMs - 5_000;
  log(`${since()} last fault done; no new keys; waiting for the app to catch up`);
  let clientsDone = false;
  const loadStopped = load.stop().then(() => (clientsDone = true));

  const { sql: checker, close: closeChecker } = connect(app.databaseUrl, { max: 2, applicationName: 'chaos-checker' });
  let settleMs: number | undefined;
  for (;;) {
    const totals = await within(10_000, 'reading the totals', readTotals(checker)).catch(() => undefined);
    if (settleMs === undefined && clientsDone && totals && settled(totals)) {
      settleMs = Date.now() - lastFault;
      log(`${since()} settled ${(settleMs / 1000).toFixed(1)} s after the last fault`);
    }
    const waited = Date.now() - lastFault;
    if (waited >= settleCapMs || (waited >= settleMinMs && settleMs !== undefined)) break;
    await sleep(1_000);
  }
  await loadStopped;

  const figures = load.figures;
  const totals = await within(30_000, 'reading the totals', readTotals(checker));
  const checks = await within(60_000, 'checking the keys', checkKeys(checker, figures.keys));
  await closeChecker();
  failures.push(...keyFailures(figures.keys, checks, totals));
  if (figures.leakCount > 0) failures.push(`${figures.leakCount} 5xx answer(s) quoting the driver, SQL or the caller's data, e.g. ${figures.leaks.slice(0, 3).join(' || ')}`);
  if (figures.unavailableWithoutRetryAfter > 0) failures.push(`${figures.unavailableWithoutRetryAfter} 503 answer(s) without Retry-After`);

  // The sender first, which says what it sent and what its pool went through.
  const finalLine = sender.line(/^FINAL (.*)$/, 60_000);
  const senderExit = await sender.stop(30_000);
  const senderFinal = (await finalLine.then((m) => JSON.parse(m[1]!) as SenderFinal).catch(() => undefined));
  if (senderExit.killed) failures.push(`the sender (pid ${sender.pid}) did not stop on SIGTERM; killed`);
  failures.push(...(await within(60_000, 'checking the sender', senderFailures(app.databaseUrl, senderFinal))));

  // Every process is stopped by its pid, in order: API, worker (finishing its jobs), payments, PostgreSQL.
  for (const service of app.services) {
    const exit = await service.stop(service.name === 'worker' ? 35_000 : 10_000);
    if (exit.killed) failures.push(`${service.name} (pid ${service.pid}) did not stop on SIGTERM; killed`);
    else if (exit.code !== 0 && exit.asked) failures.push(`${service.name} (pid ${service.pid}) exited with code ${exit.code} (signal ${exit.signal}) when stopped`);
  }
  const ownerExit = await cluster.owner.stop(30_000, 'stdin');
  if (ownerExit.killed) failures.push('the PostgreSQL owner did not stop when its stdin closed; killed');
  const pids = children.map((child) => child.pid);
  let left = leftovers(pids, [...pids, ...cluster.postmasters]);
  for (let i = 0; i < 20 && left.length > 0; i += 1) {
    await sleep(250);
    left = leftovers(pids, [...pids, ...cluster.postmasters]);
  }
  for (const process of left) failures.push(`process ${process.pid} (${process.command}, state ${process.state}) left behind`);
  for (const pid of cluster.postmasters) if (processAlive(pid)) failures.push(`postmaster ${pid} still alive`);

  printFigures({ seed, clients, load: figures, faults: done, settleMs, totalMs: Date.now() - began, sender: senderFinal, processFaults: processDone });
  for (const done_ of done) console.log(`  fault at ${(done_.startedMs / 1000).toFixed(1)} s ${done_.fault.kind}: ${done_.detail}`);
  for (const line of processDone) console.log(`  ${line}`);
  return failures.length;
}

main().then(
  (failed) => {
    if (failed === 0) {
      log(`every invariant held (seed ${seed})`);
      if (!keep) rmSync(dir, { recursive: true, force: true });
      process.exit(0);
    }
    console.error(`\nchaos: ${failed} check(s) FAILED (seed ${seed}; replay: npm run chaos -- --seed ${seed}; logs in ${dir}):`);
    for (const failure of failures) console.error(`  - ${failure}`);
    for (const child of children) {
      if (child.exit && !child.exit.asked) console.error(`\n[${child.name}] last lines:\n${child.tail().join('\n')}`);
    }
    process.exit(1);
  },
  (error: unknown) => {
    console.error(`chaos: the run could not complete (seed ${seed}; logs in ${dir}): ${error instanceof Error ? error.stack : String(error)}`);
    for (const failure of failures) console.error(`  - ${failure}`);
    for (const child of children) killGroup(child.pid);
    process.exit(2);
  },
);
