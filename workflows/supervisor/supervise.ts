/**
 * Keeps one of `npm start`'s services running: it restarts the service
 * whenever it dies, or stops working — its health probe failing for about
 * 10 s (a hung process, SIGSTOPped, deadlocked) — every time, without a
 * limit. Restarts back off from 0.5 s, doubling to 30 s; the backoff starts
 * over once the service has been healthy for a minute. A start that fails
 * (the service exits or is not ready in time) is a failure like any other.
 * Every decision is logged.
 *
 * A probe answers 'healthy', 'unhealthy', or 'unknown' when it cannot tell
 * (the worker's probe reads the database: while the database is down, the
 * worker is not to blame, and it rides the outage out by itself).
 */
import type { ServiceProcess } from './service-process.js';

export type Health = 'healthy' | 'unhealthy' | 'unknown';

export interface Started {
  service: ServiceProcess;
  match: RegExpMatchArray;
}

export interface ServiceSpec {
  name: string;
  /** Starts the service and resolves once it is ready. */
  start(): Promise<Started>;
  /** The service's health, given what its start printed; none: only its exit is watched. */
  probe?(started: Started): Promise<Health>;
}

export interface SuperviseOptions {
  log: (message: string) => void;
  /** First restart delay (default 500 ms), doubling per consecutive failure… */
  initialDelayMs?: number;
  /** …up to this (default 30 s). */
  maxDelayMs?: number;
  /** Healthy (or alive, without a probe) this long and the backoff starts over (default 60 s). */
  resetAfterMs?: number;
  /** How often the probe runs (default 1 s). */
  probeEveryMs?: number;
  /** Probes failing this long make the service one that stopped working (default 10 s). */
  unhealthyAfterMs?: number;
  /** Told of each start that became ready (to record pids, print URLs). */
  onStarted?: (started: Started, restarts: number) => void;
}

export interface Supervised {
  readonly name: string;
  /** The running service, if one is up. */
  current(): Started | undefined;
  /** Resolves with the first start (rejects if it fails: `npm start` gives up at once then). */
  readonly first: Promise<Started>;
  /** Restarts so far. */
  readonly restarts: number;
  /** Stops supervising, then stops the service (SIGTERM, SIGKILL after timeoutMs). */
  stop(timeoutMs: number): Promise<void>;
  /** Stops supervising and SIGKILLs the service's group. */
  kill(): void;
}

export function supervise(spec: ServiceSpec, options: SuperviseOptions): Supervised {
  let wake!: () => void;
  const stopped = new Promise<void>((resolve) => (wake = resolve));
  /** A pause that ends early when supervision stops. */
  const sleep = (ms: number) =>
    Promise.race([
      new Promise<void>((resolve) => setTimeout(resolve, ms).unref()),
      stopped,
    ]);
  const initialDelayMs = options.initialDelayMs ?? 500;
  const maxDelayMs = options.maxDelayMs ?? 30_000;
  const resetAfterMs = options.resetAfterMs ?? 60_000;
  const probeEveryMs = options.probeEveryMs ?? 1_000;
  const unhealthyAfterMs = options.unhealthyAfterMs ?? 10_000;
  const log = (message: string) => options.log(`${spec.name}: ${message}`);

  let current: Started | undefined;
  let stopping = false;
  let restarts = 0;
  let failures = 0;

  /** Watches one running service until it exits (or is killed for failing its probe). */
  const watch = async (started: Started): Promise<string> => {
    const { service } = started;
    let exited: string | undefined;
    void service.exited.then(({ code, signal }) => (exited = signal ? `exited on ${signal}` : `exited with code ${code}`));
    let failingSince: number | undefined;
    let healthySince = Date.now();
    while (exited === undefined && !stopping) {
      await Promise.race([sleep(probeEveryMs), service.exited]);
      if (exited !== undefined || stopping || !spec.probe) {
        if (Date.now() - healthySince >= resetAfterMs) failures = 0;
        continue;
      }
      const health = await Promise.race([spec.probe(started).catch((): Health => 'unhealthy'), sleep(Math.max(probeEveryMs, 2_000)).then((): Health => 'unhealthy')]);
      if (exited !== undefined || stopping) continue;
      if (health === 'healthy') {
        if (failingSince !== undefined) log('its health probe passes again');
        failingSince = undefined;
        if (Date.now() - healthySince >= resetAfterMs) failures = 0;
        continue;
      }
      healthySince = Date.now();
      if (health === 'unknown') continue;
      failingSince ??= Date.now();
      if (Date.now() - failingSince >= unhealthyAfterMs) {
        log(`its health probe has failed for ${Math.round((Date.now() - failingSince) / 1000)} s: it stopped working; killing pid ${service.pid}`);
        service.kill();
        await service.exited;
        return 'stopped working';
      }
    }
    return exited ?? 'stopped';
  };

  const run = async (resolveFirst: (started: Started) => void, rejectFirst: (error: unknown) => void): Promise<void> => {
    let first = true;
    while (!stopping) {
      let started: Started;
      try {
        started = await spec.start();
      } catch (error) {
        if (first) {
          rejectFirst(error);
          return;
        }
        failures += 1;
        const delayMs = Math.min(maxDelayMs, initialDelayMs * 2 ** (failures - 1));
        log(`could not start (${error instanceof Error ? error.message : String(error)}); trying again in ${delayMs / 1000} s`);
        await sleep(delayMs);
        continue;
      }
      if (stopping) {
        await started.service.stop(5_000);
        return;
      }
      current = started;
      if (first) resolveFirst(started);
      else log(`restarted (pid ${started.service.pid}, restart ${restarts})`);
      first = false;
      options.onStarted?.(started, restarts);
      const why = await watch(started);
      current = undefined;
      if (stopping) return;
      failures += 1;
      restarts += 1;
      const delayMs = Math.min(maxDelayMs, initialDelayMs * 2 ** (failures - 1));
      log(`${why}; restarting in ${delayMs / 1000} s`);
      await sleep(delayMs);
    }
  };

  let resolveFirst!: (started: Started) => void;
  let rejectFirst!: (error: unknown) => void;
  const firstStart = new Promise<Started>((resolve, reject) => {
    resolveFirst = resolve;
    rejectFirst = reject;
  });
  const running = run(resolveFirst, rejectFirst);

  return {
    name: spec.name,
    current: () => current,
    first: firstStart,
    get restarts() {
      return restarts;
    },
    async stop(timeoutMs) {
      stopping = true;
      wake();
      await current?.service.stop(timeoutMs);
      await running.catch(() => {});
    },
    kill() {
      stopping = true;
      wake();
      current?.service.kill();
    },
  };
}
