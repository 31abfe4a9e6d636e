/**
 * Faults done to the machine and the app's processes rather than to the
 * database, drawn from a stream of their own (so that a seed still replays the
 * same database faults as before these were added):
 *
 *   freeze  the API process stopped (SIGSTOP) for longer than a lease, then
 *           continued (SIGCONT): its runs in flight are taken over meanwhile,
 *           its stale work is fenced when it wakes, and the server ends its
 *           sessions left idle inside a transaction, so nobody waits on its locks
 *   hog     two busy loops pinning both cores for a while (the machine starved)
 *
 * Each is planned away from the first restart (the long outage), so that the
 * work that must go on during a freeze has a database to go on with.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Fault } from './plan.js';
import type { Prng } from './prng.js';

export type ProcessFault =
  | { kind: 'freeze'; atMs: number; holdMs: number }
  | { kind: 'hog'; atMs: number; holdMs: number };

/** A freeze outlasts a lease (8 s by default) by a few seconds. */
const FREEZE_MS: readonly [number, number] = [11_000, 14_000];
const HOG_MS: readonly [number, number] = [12_000, 20_000];

/** One freeze and one hog in the window, neither overlapping the long outage of the database plan. */
export function planProcessFaults(random: Prng, windowMs: number, database: readonly Fault[]): ProcessFault[] {
  const outage = database.find((fault) => fault.kind.startsWith('restart'));
  const busy = outage && 'downMs' in outage ? { from: outage.atMs - 2_000, to: outage.atMs + outage.downMs + 4_000 } : undefined;
  const place = (holdMs: number) => {
    for (let tries = 0; tries < 50; tries += 1) {
      const atMs = random.int(5_000, Math.max(5_000, windowMs - holdMs - 5_000));
      if (!busy || atMs + holdMs < busy.from || atMs > busy.to) return atMs;
    }
    return busy ? busy.to : 5_000;
  };
  const freezeMs = random.int(FREEZE_MS[0], FREEZE_MS[1]);
  const hogMs = random.int(HOG_MS[0], HOG_MS[1]);
  return [
    { kind: 'freeze', atMs: place(freezeMs), holdMs: freezeMs },
    { kind: 'hog', atMs: place(hogMs), holdMs: hogMs },
  ];
}

export function describeProcessFault(fault: ProcessFault): string {
  const at = `${(fault.atMs / 1000).toFixed(1)} s`;
  return fault.kind === 'freeze' ? `${at} freeze the API (${fault.holdMs} ms)` : `${at} hog both cores (${fault.holdMs} ms)`;
}

/** Two processes spinning until stopped, by their pids. */
export function startHog(): { pids: number[]; stop(): void } {
  const loops: ChildProcess[] = [0, 1].map(() => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  return {
    pids: loops.map((loop) => loop.pid!),
    stop: () => {
      for (const loop of loops) if (loop.pid !== undefined && loop.exitCode === null) loop.kill('SIGKILL');
    },
  };
}

/**
 * SIGSTOP to a process group, then SIGCONT once `watch` has answered (also if
 * it failed). `watch` is given the time the hold of `holdMs` ends: it reads
 * what went on meanwhile, and waits until then.
 */
export async function freeze<T>(pid: number, holdMs: number, watch: (endsAt: number) => Promise<T>): Promise<T> {
  const endsAt = Date.now() + holdMs;
  process.kill(-pid, 'SIGSTOP');
  try {
    return await watch(endsAt);
  } finally {
    process.kill(-pid, 'SIGCONT');
  }
}
