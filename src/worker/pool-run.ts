/**
 * One graphile-worker runner and the heartbeat of its pool: started together,
 * and neither left running without the other. A runner's pool has one id for
 * its whole life (graphile-worker locks its jobs under it); a replacement
 * runner is a new PoolRun with a new id.
 *
 * `ended` settles when graphile-worker stops by itself — its pool shut down
 * because it could not record a job's result, a breaking migration of its
 * schema was announced, … — and never after a stop() asked for. Its value
 * says whether another runner may take over (`breaking`: graphile-worker
 * says it would be unsafe to go on).
 */
import { EventEmitter } from 'node:events';
import { Logger, run, type ParsedCronItem, type Runner, type TaskList } from 'graphile-worker';
import type { Clock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Logger as StepkeyLogger } from '../log/logger.js';
import { startHeartbeat, type Heartbeat } from './heartbeat.js';
import { createJobPool, endJobPool } from './job-pool.js';
import { guardLocalQueueRelease } from './local-queue-release.js';

export interface PoolRunOptions {
  url: string;
  concurrency: number;
  taskList: TaskList;
  parsedCronItems: ParsedCronItem[];
  clock: Clock;
  leaseMs: number;
  localQueueSize: number;
  shutdownTimeoutMs: number;
  onError: (error: unknown, context: string) => void;
  log: StepkeyLogger;
}

export interface PoolEnd {
  poolId: string;
  error: Error;
  /** graphile-worker announced a breaking migration of its schema: no runner of this version may go on. */
  breaking: boolean;
}

export interface PoolRun {
  readonly poolId: string;
  /** Settles only when graphile-worker stopped by itself (never after stop()). */
  readonly ended: Promise<PoolEnd>;
  /** Drains the runner's jobs; the pool is marked stopped only after a drain asked for. */
  stop(): Promise<void>;
  /**
   * After the runner stopped by itself: stops beating without marking the
   * pool stopped, so that the dead-pool unlock frees whatever it left locked.
   */
  abandon(): Promise<void>;
}

/** graphile-worker's words when it shuts a pool down on a breaking migration of its schema. */
const BREAKING = /breaking migration/i;
/** graphile-worker's words when its local queue could not fetch jobs (it tries again at the next poll). */
const FETCH_FAILED = /Error occurred fetching jobs/;

export async function startPoolRun(options: PoolRunOptions): Promise<PoolRun> {
  const { onError } = options;
  guardLocalQueueRelease();
  const events = new EventEmitter();
  let poolId = '';
  let breaking = false;
  events.on('pool:create', ({ workerPool }: { workerPool: { id: string } }) => {
    poolId = workerPool.id;
  });
  const pgPool = createJobPool(options.url, onError);
  let poolEnded = false;
  const endPool = () => {
    if (poolEnded) return;
    poolEnded = true;
    endJobPool(pgPool, onError);
  };
  let runner: Runner;
  try {
    runner = await run({
    pgPool: pgPool as never,
    concurrency: options.concurrency,
    noHandleSignals: true,
    taskList: options.taskList,
    parsedCronItems: options.parsedCronItems,
    events: events as never,
    logger: new Logger(() => (level, message) => {
      if (BREAKING.test(message)) breaking = true;
      if (FETCH_FAILED.test(message)) events.emit('stepkey:fetchFailed');
      if (level === 'error') onError(new Error(message), 'graphile-worker');
    }),
    preset: {
      worker: {
        ...(options.localQueueSize > 0 ? { localQueue: { size: options.localQueueSize } } : {}),
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        // How long into a graceful shutdown graphile-worker aborts helpers.abortSignal (its default: 5 s).
        gracefulShutdownAbortTimeout: options.shutdownTimeoutMs,
      },
    },
  });
  } catch (error) {
    endPool();
    throw error;
  }

  let heartbeat: Heartbeat;
  try {
    if (!poolId) throw new StepkeyError('database_error', 'graphile-worker started without announcing its pool id.');
    heartbeat = await startHeartbeat({ url: options.url, clock: options.clock, poolId, leaseMs: options.leaseMs, onError, log: options.log });
  } catch (error) {
    // The runner is taking jobs already: it must not go on without a heartbeat.
    await runner.stop().catch((stopError: unknown) => onError(stopError, 'stopping graphile-worker after a failed start'));
    endPool();
    throw error;
  }

  let stopAsked = false;
  let runnerEnded = false;
  let stalled: NodeJS.Timeout | undefined;
  const id = poolId;
  // runner.promise settles when graphile-worker stops — after our runner.stop(), or by itself
  // (it resolves even then: graphile-worker logs the reason, which reached onError).
  const ended = new Promise<PoolEnd>((resolve) => {
    const end = (error: Error) => {
      if (stalled) clearTimeout(stalled);
      if (notFetching) clearTimeout(notFetching);
      if (runnerEnded) return;
      runnerEnded = true;
      if (!stopAsked) resolve({ poolId: id, error, breaking });
    };
    // A pool that could not record a job's result shuts down gracefully, and that shutdown can hang on
    // the database that failed it (seen with the connection limit held): the pool takes no job while
    // it hangs. Past the bound it counts as stopped — it stops beating, so the dead-pool unlock frees
    // what it holds, and a new runner takes over (deliveries are at least once; consumers dedupe).
    const stallBoundMs = Math.min(options.shutdownTimeoutMs, options.leaseMs) + 2_000;
    events.on('pool:fatalError', () => {
      if (stalled || runnerEnded) return;
      stalled = setTimeout(() => {
        end(
          new StepkeyError(
            'database_error',
            `graphile-worker's pool ${id} could not record job results and did not stop within ${stallBoundMs} ms; it is replaced.`,
          ),
        );
        runner
          .stop()
          .catch((error: unknown) => onError(error, 'stopping a stalled graphile-worker pool'))
          .finally(endPool);
      }, stallBoundMs);
      stalled.unref();
    });
    // A pool whose fetches keep failing takes no job, and can stay so: graphile-worker 0.17 can keep a
    // client its connection error left unusable ("not queryable") and fetch through it at every poll.
    // A fetch failing without a good one for the bound counts as the pool stopped, as above.
    let notFetching: NodeJS.Timeout | undefined;
    const fetched = () => {
      if (notFetching) clearTimeout(notFetching);
      notFetching = undefined;
    };
    events.on('localQueue:getJobs:complete', fetched);
    events.on('worker:getJob:empty', fetched);
    events.on('job:start', fetched);
    const fetchFailed = () => {
      if (notFetching || runnerEnded) return;
      notFetching = setTimeout(() => {
        end(new StepkeyError('database_error', `graphile-worker's pool ${id} could not fetch jobs for ${stallBoundMs} ms; it is replaced.`));
        runner
          .stop()
          .catch((error: unknown) => onError(error, 'stopping a graphile-worker pool that could not fetch jobs'))
          .finally(endPool);
      }, stallBoundMs);
      notFetching.unref();
    };
    events.on('stepkey:fetchFailed', fetchFailed);
    events.on('worker:getJob:error', fetchFailed);
    // Once the runner is done (stopped, or by itself), so is its pool.
    runner.promise.then(endPool, endPool);
    runner.promise.then(
      () =>
        end(
          new StepkeyError(
            'database_error',
            `graphile-worker's pool ${id} stopped by itself (job results it could not record, a database that went ` +
              'away, or a breaking migration of its schema by another process; its errors were reported before).',
          ),
        ),
      (error: unknown) => end(error instanceof Error ? error : new Error(String(error))),
    );
  });

  return {
    poolId: id,
    ended,
    async stop() {
      stopAsked = true;
      const endedBefore = runnerEnded;
      let drained = true;
      if (!endedBefore) {
        await runner.stop().catch((error: unknown) => {
          drained = false;
          onError(error, 'stopping graphile-worker');
        });
      }
      endPool();
      // The pool beat on while its jobs drained. It is marked stopped only after a drain asked for:
      // after anything else, the other workers declare it dead and unlock what it may have left locked.
      await heartbeat.stop({ markStopped: drained && !endedBefore });
    },
    async abandon() {
      stopAsked = true;
      endPool();
      await heartbeat.stop({ markStopped: false });
    },
  };
}
