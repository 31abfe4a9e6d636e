/**
 * The suite's side of its PostgreSQL (see postgres-owner.ts): start the
 * owner, learn the URL and the postmaster's pid, and restart the server with
 * a fast or an immediate shutdown. Nothing here touches the shared server on
 * 5432: the cluster is new, in a temporary folder, on a free port.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startChild, type Child } from './child.js';

export interface ChaosCluster {
  readonly owner: Child;
  readonly url: string;
  /** The current postmaster's pid (a new one after each restart). */
  postmasterPid(): number;
  /** Every postmaster pid this cluster has had. */
  readonly postmasters: number[];
  /** Stops the server (SIGINT fast / SIGQUIT immediate), waits `downMs`, starts it again. */
  restart(mode: 'fast' | 'immediate', downMs: number): Promise<{ stopMs: number; startMs: number }>;
}

/**
 * fsync is off (the machine does not crash, Postgres does: what the kernel
 * was given survives an immediate shutdown), but synchronous_commit stays on:
 * with it off, an immediate shutdown loses the last commits the app was told
 * had happened, which no application can survive.
 */
const flags = ['-c', 'max_connections=100', '-c', 'fsync=off'];

export const maxConnections = 100;

export async function startCluster(dir: string, projectRoot: string, began: number): Promise<ChaosCluster> {
  mkdirSync(dir, { recursive: true });
  const owner = startChild('postgres', 'test/chaos/postgres-owner.ts', {
    cwd: projectRoot,
    env: { CHAOS_PG_DIR: dir, CHAOS_PG_FLAGS: JSON.stringify(flags) },
    logFile: join(dir, 'owner.log'),
    began,
  });
  const failed = owner.line(/^FAILED (.*)$/, 24 * 3600_000).then((m) => {
    throw new Error(`the chaos cluster failed: ${m[1]}`);
  });
  failed.catch(() => {});
  const ready = async () => {
    const m = await Promise.race([owner.line(/^READY (\S+) (\d+)$/, 120_000), failed]);
    return { url: m[1]!, pid: Number(m[2]) };
  };
  const first = await ready();
  const postmasters = [first.pid];
  let current = first.pid;
  return {
    owner,
    url: first.url,
    postmasterPid: () => current,
    postmasters,
    async restart(mode, downMs) {
      const began = Date.now();
      const down = owner.line(/^DOWN (\d+)$/, 60_000);
      owner.process.stdin!.write(`stop ${mode}\n`);
      await Promise.race([down, failed]);
      const stopMs = Date.now() - began;
      await new Promise((resolve) => setTimeout(resolve, downMs));
      const starting = Date.now();
      const up = ready();
      owner.process.stdin!.write('start\n');
      const { pid } = await up;
      current = pid;
      postmasters.push(pid);
      return { stopMs, startMs: Date.now() - starting };
    },
  };
}
