/**
 * A worker's heartbeat: it registers the worker's graphile-worker pool, beats
 * for it every third of the lease and unlocks the jobs of pools that stopped
 * beating — on a connection of its own. Effect transactions hold app-pool
 * connections for their whole handler, so a busy worker whose pool is
 * exhausted would otherwise stop beating and be declared dead while healthy.
 */
import { connect } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { beatPool, registerPool, stopPool, unlockDeadPools } from './pool-liveness.js';
import type { Logger } from '../log/logger.js';

export interface HeartbeatOptions {
  /** The database's URL: the heartbeat opens one connection of its own to it. */
  url: string;
  clock: Clock;
  poolId: string;
  /** A pool silent this long is dead; the beat comes every third of it. */
  leaseMs: number;
  onError: (error: unknown, context: string) => void;
  /** Where dead pools unlocked are logged. */
  log?: Logger;
}

export interface Heartbeat {
  /**
   * Stops beating. Guarantee: no beat is in flight or sent afterwards (so a
   * late beat cannot undo the stop mark). With `markStopped`, the pool is
   * marked stopped — only when its jobs are released: a pool left unmarked is
   * declared dead by the other workers after the lease, which unlock its jobs.
   */
  stop(options: { markStopped: boolean }): Promise<void>;
}

/** Registers the pool and starts beating; throws (and closes its connection) if registering fails. */
export async function startHeartbeat(options: HeartbeatOptions): Promise<Heartbeat> {
  const { clock, poolId, leaseMs, onError } = options;
  const connection = connect(options.url, { max: 1, applicationName: 'stepkey worker heartbeat' });
  try {
    await registerPool(connection.sql, clock, poolId);
  } catch (error) {
    await connection.close().catch(() => {});
    throw error;
  }
  // One beat at a time: a slow beat is not queued behind by the next ones.
  let inFlight: Promise<void> | undefined;
  const timer = setInterval(() => {
    inFlight ??= beatPool(connection.sql, clock, poolId)
      .then(() => unlockDeadPools(connection.sql, clock, leaseMs, poolId))
      .then(
        (unlocked) => {
          for (const pool of unlocked) {
            options.log?.warn({ event: 'worker.dead_pool_unlocked', pool, by: poolId }, `worker pool ${pool} stopped beating; its jobs were unlocked`);
          }
        },
        (error: unknown) => onError(error, 'worker liveness'),
      )
      .finally(() => {
        inFlight = undefined;
      });
  }, Math.max(50, Math.floor(leaseMs / 3)));

  return {
    async stop({ markStopped }) {
      clearInterval(timer);
      await inFlight;
      try {
        if (markStopped) await stopPool(connection.sql, clock, poolId);
      } catch (error) {
        onError(error, 'marking the pool stopped');
      } finally {
        await connection.close().catch((error: unknown) => onError(error, 'closing the heartbeat connection'));
      }
    },
  };
}
