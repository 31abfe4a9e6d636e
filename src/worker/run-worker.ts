/**
 * The worker process: graphile-worker running the effect consumers, the run
 * sweeper (resumes runs whose process died), the dead-pool unlock, and the
 * purge of expired keys on a cron schedule.
 *
 * Signals belong to the application (graphile-worker's own handlers are off):
 * stop() — and SIGTERM/SIGINT with handleSignals — stops taking jobs and runs,
 * lets in-flight jobs finish (their abort signal fires after
 * `shutdownTimeoutMs`), gives run leases up for other workers, and marks the
 * pool stopped. The pool keeps beating until its jobs have drained.
 *
 * If graphile-worker stops by itself (a breaking migration, a queue it cannot
 * update), the worker reports it through onError, stops the rest, and
 * `closed` rejects.
 */
import { EventEmitter } from 'node:events';
import { Logger, run, type Runner, type TaskList } from 'graphile-worker';
import { connect, type Database } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { retryHorizonMs, type Effect } from '../outbox/effect.js';
import { effectTask } from '../outbox/inbox.js';
import type { Workflow } from '../workflow/define.js';
import { createEngine, type Engine } from '../workflow/engine.js';
import { startHeartbeat, type Heartbeat } from './heartbeat.js';
import { purgeExpired } from './purge.js';

export interface WorkerOptions {
  /** A database from connect(), or a URL (the worker then owns its pool). */
  database: Database | string;
  /** Workflows whose runs this worker resumes after a crash. */
  workflows?: readonly Workflow[];
  /** Effects whose jobs this worker consumes. */
  effects?: readonly Effect[];
  /** Jobs run at once (default 10). */
  concurrency?: number;
  clock?: Clock;
  /** Lease of runs and of worker pools (default 8 s, env STEPKEY_LEASE_MS). */
  leaseMs?: number;
  sweepIntervalMs?: number;
  /** How long inbox rows are kept (default 7 days; at least the longest retry horizon). */
  inboxRetentionMs?: number;
  /** Cron schedule of the purge (default every minute); false to leave purging to `stepkey purge`. */
  purgeSchedule?: string | false;
  /** Stop on SIGTERM/SIGINT and exit (0 if the stop was clean). Default false. */
  handleSignals?: boolean;
  /** How long stop() lets jobs run before their abort signal fires, and runs before leases are given up (default 30 s). */
  shutdownTimeoutMs?: number;
  /** An engine to sweep with, instead of one made from `workflows`. */
  engine?: Engine;
  /** Local-queue size of graphile-worker (default 50; 0 turns the local queue off). */
  localQueueSize?: number;
  onError?: (error: unknown, context: string) => void;
}

export interface Worker {
  readonly engine: Engine;
  /** graphile-worker's pool id: the id its jobs are locked under. */
  readonly poolId: string;
  stop(): Promise<void>;
  /**
   * Settles once the worker has stopped: resolves after stop(); rejects with
   * the reason when the worker stopped by itself because graphile-worker did.
   */
  readonly closed: Promise<void>;
}

const DEFAULT_INBOX_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;
/** Connections of an owned pool beyond one per job: the sweeper's resumed runs (8 by default) and the purge. */
const OWNED_POOL_MARGIN = 10;

export async function runWorker(options: WorkerOptions): Promise<Worker> {
  const concurrency = options.concurrency ?? 10;
  const shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30_000;
  const owned = typeof options.database === 'string';
  // Each job in flight holds a pooled connection for its whole handler.
  const database =
    typeof options.database === 'string' ? connect(options.database, { max: concurrency + OWNED_POOL_MARGIN }) : options.database;
  const clock = options.clock ?? systemClock;
  const onError = options.onError ?? ((error, context) => console.error(`stepkey worker: ${context}:`, error));
  const effects = options.effects ?? [];
  const inboxRetentionMs = options.inboxRetentionMs ?? DEFAULT_INBOX_RETENTION_MS;
  for (const effect of effects) {
    const horizon = retryHorizonMs(effect.maxAttempts);
    if (inboxRetentionMs < horizon) {
      throw new StepkeyError(
        'invalid_options',
        `inboxRetentionMs (${inboxRetentionMs} ms) is shorter than the retry horizon of effect '${effect.name}' ` +
          `(${horizon} ms for ${effect.maxAttempts} attempts): a late redelivery could be applied twice.`,
      );
    }
  }
  const engine =
    options.engine ??
    createEngine({
      database,
      workflows: options.workflows ?? [],
      clock,
      ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
      ...(options.sweepIntervalMs === undefined ? {} : { sweepIntervalMs: options.sweepIntervalMs }),
      onError,
    });
  const deps = { sql: database.sql, clock, inboxRetentionMs };
  const taskList: TaskList = {
    'stepkey:purge': async () => {
      await purgeExpired(database.sql, { clock });
    },
  };
  for (const effect of effects) {
    if (taskList[effect.name]) throw new StepkeyError('definition_error', `Two effects are named '${effect.name}'.`);
    taskList[effect.name] = effectTask(deps, effect);
  }

  const events = new EventEmitter();
  let poolId = '';
  events.on('pool:create', ({ workerPool }: { workerPool: { id: string } }) => {
    poolId = workerPool.id;
  });
  const schedule = options.purgeSchedule ?? '* * * * *';
  const localQueueSize = options.localQueueSize ?? 50;
  const runner: Runner = await run({
    connectionString: database.url,
    concurrency,
    noHandleSignals: true,
    taskList,
    ...(schedule === false ? { parsedCronItems: [] } : { crontab: `${schedule} stepkey:purge` }),
    events: events as never,
    logger: new Logger(() => (level, message) => {
      if (level === 'error') onError(new Error(message), 'graphile-worker');
    }),
    preset: {
      worker: {
        ...(localQueueSize > 0 ? { localQueue: { size: localQueueSize } } : {}),
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        // How long into a graceful shutdown graphile-worker aborts helpers.abortSignal (its default: 5 s).
        gracefulShutdownAbortTimeout: shutdownTimeoutMs,
      },
    },
  }).catch(async (error: unknown) => {
    if (owned) await database.close();
    throw error;
  });

  let heartbeat: Heartbeat;
  try {
    if (!poolId) throw new StepkeyError('database_error', 'graphile-worker started without announcing its pool id.');
    heartbeat = await startHeartbeat({ url: database.url, clock, poolId, leaseMs: engine.leaseMs, onError });
  } catch (error) {
    // The runner is taking jobs already: it must not go on without a heartbeat.
    await runner.stop().catch((stopError: unknown) => onError(stopError, 'stopping graphile-worker after a failed start'));
    if (owned) await database.close();
    throw error;
  }
  engine.startSweeper();

  let stopping: Promise<void> | undefined;
  let runnerEnded = false;
  /** Why the worker stopped by itself; undefined after a stop() asked for. */
  let failure: Error | undefined;
  let settle!: (error: unknown) => void;
  const closed = new Promise<void>((resolve, reject) => {
    settle = (error) => (error === undefined ? resolve() : reject(error));
  });
  // Whoever does not watch `closed` still hears of a failure through onError.
  closed.catch(() => {});

  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      const [runs, drained] = await Promise.allSettled([
        engine.shutdown({ timeoutMs: shutdownTimeoutMs }),
        runnerEnded ? undefined : runner.stop(),
      ]);
      if (runs.status === 'rejected') onError(runs.reason, 'stopping the runs');
      if (drained.status === 'rejected') onError(drained.reason, 'stopping graphile-worker');
      // The pool beat on while its jobs drained. It is marked stopped only after a drain asked for:
      // after anything else, the other workers declare it dead and unlock what it may have left locked.
      await heartbeat.stop({ markStopped: drained.status === 'fulfilled' && failure === undefined });
      if (owned) await database.close();
    })().then(
      () => settle(failure),
      (error: unknown) => {
        settle(error);
        throw error;
      },
    ));

  // runner.promise settles when graphile-worker stops — after our runner.stop(), or by itself.
  const ended = (error: Error) => {
    runnerEnded = true;
    if (stopping) return;
    failure = error;
    onError(error, 'graphile-worker');
    stop().catch((stopError: unknown) => onError(stopError, 'shutdown'));
  };
  runner.promise.then(
    () =>
      ended(
        new StepkeyError(
          'database_error',
          `graphile-worker's pool ${poolId} stopped by itself (a breaking migration of its schema by another ` +
            'process, or job results it could not record; its errors were reported before): this worker consumed ' +
            'no more jobs, so it has stopped.',
        ),
      ),
    (error: unknown) => ended(error instanceof Error ? error : new Error(String(error))),
  );

  if (options.handleSignals) {
    const onSignal = (signal: NodeJS.Signals) => {
      const timeout = setTimeout(() => {
        onError(new Error(`did not stop within ${shutdownTimeoutMs} ms after ${signal}`), 'shutdown');
        process.exit(1);
      }, shutdownTimeoutMs + 5_000);
      timeout.unref();
      stop().then(
        () => process.exit(0),
        (error: unknown) => {
          onError(error, 'shutdown');
          process.exit(1);
        },
      );
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  }

  return { engine, poolId, stop, closed };
}
