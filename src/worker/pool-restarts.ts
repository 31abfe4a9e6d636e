/**
 * Keeps a worker consuming when graphile-worker stops by itself. graphile-worker
 * 0.17 shuts its pool down when it cannot record a job's result (a Postgres
 * restart, a terminated backend): the runner is over, but the database may
 * come back a moment later. The worker then replaces it with a new runner —
 * a new pool id; the old pool stops beating without being marked stopped, so
 * the dead-pool unlock frees the jobs it left locked and they run again —
 * retrying with backoff while the database is down. The sweeper and the
 * worker's other duties go on meanwhile.
 *
 * It gives up only when going on is unsafe or hopeless: graphile-worker
 * announced a breaking migration of its schema, or a replacement fails with
 * an error that retrying cannot fix (an SQLSTATE of class 0A, 22, 42 or 3F:
 * a table or function gone, privileges, …). `gaveUp` then settles.
 */
import { errorCode, permanentSqlStateClasses } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { serializeError } from '../ledger/outcome.js';
import type { Logger } from '../log/logger.js';
import type { PoolEnd, PoolRun } from './pool-run.js';

export interface RestartBackoff {
  /** Delay before the first replacement attempt (default 500 ms); it doubles after each failed one. */
  initialDelayMs?: number;
  /** Longest delay between attempts (default 5 s); a runner that lived this long resets the backoff. */
  maxDelayMs?: number;
}

export interface RunnerSupervision {
  /** The pool id of the runner running now (or of the last one, while a replacement is awaited). */
  readonly poolId: string;
  /** How many runners replaced one that stopped by itself. */
  readonly restarts: number;
  /** Settles with the reason when the worker cannot go on; never after stop(). */
  readonly gaveUp: Promise<Error>;
  /** Stops the current runner (draining it) or the replacement awaited. */
  stop(): Promise<void>;
}

interface Options {
  backoff?: RestartBackoff;
  onError: (error: unknown, context: string) => void;
  log: Logger;
}

/** Whether a failed start of a runner would fail the same way however often it is retried. */
function isHopeless(error: unknown): boolean {
  const code = errorCode(error);
  if (code && /^[0-9A-Z]{5}$/.test(code) && (permanentSqlStateClasses as readonly string[]).includes(code.slice(0, 2))) return true;
  return error instanceof Error && /breaking migration/i.test(error.message);
}

/** Starts the first runner (its failure is thrown) and replaces each one that stops by itself. */
export async function superviseRunners(start: () => Promise<PoolRun>, options: Options): Promise<RunnerSupervision> {
  const initialDelayMs = options.backoff?.initialDelayMs ?? 500;
  const maxDelayMs = Math.max(initialDelayMs, options.backoff?.maxDelayMs ?? 5_000);
  const { onError, log } = options;

  let current: PoolRun | undefined = await start();
  let poolId = current.poolId;
  let startedAt = Date.now();
  let attempt = 0;
  let restarts = 0;
  let stopping = false;
  let wake: (() => void) | undefined;
  let replacing: Promise<void> | undefined;
  let giveUp!: (error: Error) => void;
  const gaveUp = new Promise<Error>((resolve) => (giveUp = resolve));

  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    }).finally(() => (wake = undefined));

  const replace = async (end: PoolEnd): Promise<void> => {
    const old = current!;
    current = undefined;
    onError(end.error, 'graphile-worker');
    // Its pool stops beating, unmarked: once it has been silent for a lease, its jobs are unlocked.
    await old.abandon();
    if (end.breaking) {
      log.error({ event: 'worker.gave_up', pool: end.poolId, error: serializeError(end.error) }, 'graphile-worker stopped on a breaking migration of its schema; the worker stops');
      giveUp(
        new StepkeyError('database_error', `${end.error.message} graphile-worker announced a breaking migration of its schema: this worker cannot go on, so it has stopped.`, { cause: end.error }),
      );
      return;
    }
    if (Date.now() - startedAt >= maxDelayMs) attempt = 0;
    log.warn({ event: 'worker.runner_stopped', pool: end.poolId, error: serializeError(end.error) }, `graphile-worker's pool ${end.poolId} stopped by itself; starting a new runner`);
    while (!stopping) {
      const delayMs = Math.min(maxDelayMs, initialDelayMs * 2 ** attempt);
      attempt += 1;
      await pause(delayMs);
      if (stopping) return;
      let next: PoolRun;
      try {
        next = await start();
      } catch (error) {
        if (isHopeless(error)) {
          log.error({ event: 'worker.gave_up', pool: end.poolId, error: serializeError(error) }, 'a new graphile-worker runner cannot start; the worker stops');
          giveUp(
            new StepkeyError('database_error', `${end.error.message} A new runner could not start and retrying cannot help (${error instanceof Error ? error.message : String(error)}): this worker has stopped.`, { cause: error }),
          );
          return;
        }
        log.warn(
          { event: 'worker.runner_restart_failed', attempt, retryInMs: Math.min(maxDelayMs, initialDelayMs * 2 ** attempt), error: serializeError(error) },
          'a new graphile-worker runner could not start yet; retrying',
        );
        continue;
      }
      if (stopping) {
        await next.stop();
        return;
      }
      current = next;
      poolId = next.poolId;
      startedAt = Date.now();
      restarts += 1;
      log.info({ event: 'worker.runner_restarted', pool: next.poolId, replaces: end.poolId, attempt }, `graphile-worker runs again as pool ${next.poolId} (replacing ${end.poolId})`);
      watch(next);
      return;
    }
  };

  const watch = (run: PoolRun) => {
    void run.ended.then((end) => {
      if (stopping || current !== run) return;
      replacing = replace(end).catch((error: unknown) => {
        giveUp(error instanceof Error ? error : new Error(String(error)));
      });
    });
  };
  watch(current);

  return {
    get poolId() {
      return poolId;
    },
    get restarts() {
      return restarts;
    },
    gaveUp,
    async stop() {
      stopping = true;
      wake?.();
      await replacing;
      await current?.stop();
    },
  };
}
