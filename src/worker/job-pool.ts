/**
 * The pg pool a graphile-worker runner uses, owned by stepkey. graphile-worker
 * 0.17 removes its error listeners from a pool it made when its runner stops,
 * and ends that pool without waiting: a client still checked out by a
 * stalled or replaced runner that then fails (its backend terminated, a
 * restart) emits 'error' on a pool with no listener, which kills the process.
 * Here the listeners stay for the pool's whole life, errors go to `onError`,
 * and the pool is ended once its runner is done with it.
 *
 * The pool class is the `pg` graphile-worker itself depends on (resolved from
 * graphile-worker's folder), so that both use one copy.
 */
import { createRequire } from 'node:module';

export interface JobPool {
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'connect', listener: (client: { on(event: 'error', listener: (error: Error) => void): unknown }) => void): unknown;
  end(): Promise<void>;
}

type PoolClass = new (options: { connectionString: string; max: number }) => JobPool;

let poolClass: PoolClass | undefined;

function pgPoolClass(): PoolClass {
  if (!poolClass) {
    const fromHere = createRequire(import.meta.url);
    const fromWorker = createRequire(fromHere.resolve('graphile-worker'));
    poolClass = (fromWorker('pg') as { Pool: PoolClass }).Pool;
  }
  return poolClass;
}

/** graphile-worker's own default pool size (maxPoolSize). */
const DEFAULT_MAX = 10;

export function createJobPool(url: string, onError: (error: unknown, context: string) => void): JobPool {
  const Pool = pgPoolClass();
  const pool = new Pool({ connectionString: url, max: DEFAULT_MAX });
  pool.on('error', (error) => onError(error, 'graphile-worker: an idle PostgreSQL client failed'));
  pool.on('connect', (client) => client.on('error', (error) => onError(error, 'graphile-worker: a PostgreSQL client in use failed')));
  return pool;
}

/** Ends the pool without waiting: a client a stalled runner still holds ends when it is released. */
export function endJobPool(pool: JobPool, onError: (error: unknown, context: string) => void): void {
  pool.end().catch((error: unknown) => onError(error, 'ending graphile-worker’s pool'));
}
