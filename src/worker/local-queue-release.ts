/**
 * A guard around one path of graphile-worker 0.17.3's local queue that would
 * crash the process with an unhandled rejection when its pool stops while
 * the database is down.
 *
 * When a pool shuts down with jobs waiting in its local queue and nothing
 * else in the background, `LocalQueue#setModeReleased()` calls
 * `returnJobs()`, which builds the promise that gives the jobs back and then
 * passes it to `background()` — which throws at once ("Cannot background
 * something when the queue is already released"), so that promise never gets
 * a handler. While the database is up it resolves and nothing shows; while
 * it is down it rejects ("Error occurred whilst returning jobs from local
 * queue to database queue: …") and, unhandled, ends the process.
 *
 * The guard marks exactly that promise handled and changes nothing else (the
 * throw still happens, as graphile-worker expects). The jobs it could not
 * give back stay locked under the stopped pool's id, which no longer beats:
 * the dead-pool unlock (pool-liveness.ts) frees them and they run again.
 * Applied once per process, only to the version it was written for.
 */
import { createRequire } from 'node:module';

interface LocalQueueInternals {
  mode: string;
  backgroundCount: number;
  background(promise: Promise<unknown>): void;
}

const require = createRequire(import.meta.url);
let applied = false;

export function guardLocalQueueRelease(): void {
  if (applied) return;
  applied = true;
  const version = (require('graphile-worker/package.json') as { version: string }).version;
  if (!version.startsWith('0.17.')) return;
  const { LocalQueue } = require('graphile-worker/dist/localQueue.js') as { LocalQueue: { prototype: LocalQueueInternals } };
  const background = LocalQueue.prototype.background;
  if (typeof background !== 'function') return;
  LocalQueue.prototype.background = function guardedBackground(this: LocalQueueInternals, promise: Promise<unknown>) {
    // background() is about to refuse this promise: it would be left without a handler.
    if (this.mode === 'RELEASED' && this.backgroundCount === 0) promise.catch(() => {});
    return background.call(this, promise);
  };
}
