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
 * If graphile-worker stops by itself — it could not record a job's result
 * because Postgres restarted or a backend was terminated — the worker reports
 * it through onError and starts a new runner under a new pool id, with
 * backoff while the database is down (pool-restarts.ts); the sweeper and the
 * purge go on, and the old pool's locked jobs are unlocked once it has been
 * silent for a lease. Only when no runner can go on (a breaking migration of
 * graphile-worker's schema, an error retrying cannot fix) does the worker
 * stop the rest and `closed` reject.
 */
import { parseCrontab, type TaskList } from 'graphile-worker';
import type { Schedule } from '../schedules/define-schedule.js';
import { scheduleTask } from '../schedules/schedule-task.js';
import { connect, type Database } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { retryHorizonMs, type Effect } from '../outbox/effect.js';
import { effectTask } from '../outbox/inbox.js';
import type { Workflow } from '../workflow/define.js';
import type { Limit } from '../flow/define-limit.js';
import type { Queue } from '../flow/define-queue.js';
import { createEngine, type Engine } from '../engine/engine.js';
import { superviseRunners, type RestartBackoff } from './pool-restarts.js';
import { startPoolRun } from './pool-run.js';
import { purgeExpired } from './purge.js';
import { resolveLogger, type Logger as StepkeyLogger } from '../log/logger.js';

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
  /** Schedules whose ticks this worker fires (their workflows are registered with its engine). */
  schedules?: readonly Schedule[];
  /** Queues whose waiting runs this worker dispatches (see defineQueue); with `engine`, give them to createEngine instead. */
  queues?: readonly Queue<any>[];
  /** Step limits the workflows take from (see defineLimit); with `engine`, give them to createEngine instead. */
  limits?: readonly Limit<any>[];
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
  /** Backoff of the replacements of a runner that stopped by itself (default 500 ms doubling to 5 s). */
  restartBackoff?: RestartBackoff;
  onError?: (error: unknown, context: string) => void;
  /**
   * Where deliveries, dead pools unlocked and (for the engine it makes) takeovers,
   * resumes, retries and unknown outcomes are logged: a pino logger or one with
   * its methods, false for none (default: pino if installed).
   */
  logger?: StepkeyLogger | false;
}

export interface Worker {
  readonly engine: Engine;
  /** graphile-worker's pool id: the id its jobs are locked under (a new one after each restart of the runner). */
  readonly poolId: string;
  /** How many times a runner that stopped by itself was replaced. */
  readonly restarts: number;
  stop(): Promise<void>;
  /**
   * Settles once the worker has stopped: resolves after stop(); rejects with
   * the reason when the worker stopped by itself because no graphile-worker
   * runner could go on.
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
  if (options.engine && (options.queues?.length || options.limits?.length)) {
    throw new StepkeyError(
      'invalid_options',
      'runWorker: queues and limits belong to the engine; with `engine`, pass them to createEngine({ queues, limits }).',
    );
  }
  const engine =
    options.engine ??
    createEngine({
      database,
      // A schedule's workflow is registered from the start, so that the limits its steps name are too.
      workflows: withScheduled(options.workflows ?? [], options.schedules ?? []),
      ...(options.queues === undefined ? {} : { queues: options.queues }),
      ...(options.limits === undefined ? {} : { limits: options.limits }),
      clock,
      ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
      ...(options.sweepIntervalMs === undefined ? {} : { sweepIntervalMs: options.sweepIntervalMs }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
      onError,
    });
  const log = resolveLogger(options.logger);
  const deps = { sql: database.sql, clock, inboxRetentionMs, log };
  const taskList: TaskList = {
    'stepkey:purge': async () => {
      await purgeExpired(database.sql, { clock });
    },
  };
  for (const effect of effects) {
    if (taskList[effect.name]) throw new StepkeyError('definition_error', `Two effects are named '${effect.name}'.`);
    taskList[effect.name] = effectTask(deps, effect);
  }
  const schedules = options.schedules ?? [];
  for (const schedule of schedules) {
    if (schedule?.kind !== 'stepkey.schedule') throw new StepkeyError('definition_error', 'runWorker({ schedules }) takes schedules made with defineSchedule().');
    if (taskList[schedule.task]) throw new StepkeyError('definition_error', `Two schedules are named '${schedule.name}'.`);
    if (!engine.registry.get(schedule.workflow.name, schedule.workflow.version)) engine.registry.add(schedule.workflow);
    taskList[schedule.task] = scheduleTask(engine, schedule);
  }

  const schedule = options.purgeSchedule ?? '* * * * *';
  const startRun = () =>
    startPoolRun({
      url: database.url,
      concurrency,
      taskList,
      parsedCronItems: [...(schedule === false ? [] : parseCrontab(`${schedule} stepkey:purge`)), ...schedules.map((item) => item.cronItem)],
      clock,
      leaseMs: engine.leaseMs,
      localQueueSize: options.localQueueSize ?? 50,
      shutdownTimeoutMs,
      onError,
      log,
    });
  const runners = await superviseRunners(startRun, {
    onError,
    log,
    ...(options.restartBackoff === undefined ? {} : { backoff: options.restartBackoff }),
  }).catch(async (error: unknown) => {
    if (owned) await database.close();
    throw error;
  });
  engine.startSweeper();

  let stopping: Promise<void> | undefined;
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
      const [runs, drained] = await Promise.allSettled([engine.shutdown({ timeoutMs: shutdownTimeoutMs }), runners.stop()]);
      if (runs.status === 'rejected') onError(runs.reason, 'stopping the runs');
      if (drained.status === 'rejected') onError(drained.reason, 'stopping graphile-worker');
      if (owned) await database.close();
    })().then(
      () => settle(failure),
      (error: unknown) => {
        settle(error);
        throw error;
      },
    ));

  // A runner that stops by itself is replaced (pool-restarts.ts); this settles only when none can be.
  void runners.gaveUp.then((error) => {
    if (stopping) return;
    failure = error;
    onError(error, 'worker');
    stop().catch((stopError: unknown) => onError(stopError, 'shutdown'));
  });

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

  return {
    engine,
    get poolId() {
      return runners.poolId;
    },
    get restarts() {
      return runners.restarts;
    },
    stop,
    closed,
  };
}

function withScheduled(workflows: readonly Workflow[], schedules: readonly Schedule[]): Workflow[] {
  const all = [...workflows];
  for (const schedule of schedules) {
    const workflow = schedule?.kind === 'stepkey.schedule' ? schedule.workflow : undefined;
    if (workflow && !all.some((known) => known.name === workflow.name && known.version === workflow.version)) all.push(workflow);
  }
  return all;
}
