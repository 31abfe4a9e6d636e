/**
 * The worker process: graphile-worker running the effect consumers, the run
 * sweeper (resumes runs whose process died), the dead-pool unlock, and the
 * purge of expired keys on a cron schedule.
 *
 * Signals belong to the application (graphile-worker's own handlers are off):
 * stop() — and SIGTERM/SIGINT with handleSignals — stops taking jobs and runs,
 * lets in-flight jobs finish, gives run leases up for other workers, and
 * marks the pool stopped, within `shutdownTimeoutMs`.
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
import { beatPool, registerPool, stopPool, unlockDeadPools } from './pool-liveness.js';
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
}

const DEFAULT_INBOX_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

export async function runWorker(options: WorkerOptions): Promise<Worker> {
  const owned = typeof options.database === 'string';
  const database = typeof options.database === 'string' ? connect(options.database, { max: 20 }) : options.database;
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
    concurrency: options.concurrency ?? 10,
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
      },
    },
  });
  if (!poolId) throw new StepkeyError('database_error', 'graphile-worker started without announcing its pool id.');
  await registerPool(database.sql, clock, poolId);

  const leaseMs = engine.leaseMs;
  const liveness = setInterval(() => {
    beatPool(database.sql, clock, poolId)
      .then(() => unlockDeadPools(database.sql, clock, leaseMs))
      .catch((error: unknown) => onError(error, 'worker liveness'));
  }, Math.max(50, Math.floor(leaseMs / 3)));
  engine.startSweeper();

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      clearInterval(liveness);
      await Promise.all([engine.shutdown({ timeoutMs: options.shutdownTimeoutMs ?? 30_000 }), runner.stop()]);
      await stopPool(database.sql, clock, poolId).catch((error: unknown) => onError(error, 'marking the pool stopped'));
      if (owned) await database.close();
    })());

  if (options.handleSignals) {
    const onSignal = (signal: NodeJS.Signals) => {
      const timeout = setTimeout(() => {
        onError(new Error(`did not stop within ${options.shutdownTimeoutMs ?? 30_000} ms after ${signal}`), 'shutdown');
        process.exit(1);
      }, (options.shutdownTimeoutMs ?? 30_000) + 5_000);
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

  return { engine, poolId, stop };
}
