/**
 * Recovery: seconds from the SIGKILL of a process running a run to that
 * run's completion by a worker (its sweeper), with default lease and sweep
 * interval, over many kills in parallel batches.
 */
import { fileURLToPath } from 'node:url';
import { connect } from '../../src/db/connect.js';
import { spawnScript } from '../../src/testing/child-process.js';
import { benchDatabase, printTable } from './harness.js';

const child = fileURLToPath(new URL('./recovery-child.ts', import.meta.url));

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

export async function recoveryBench(options: { ops: number; runs: number }): Promise<void> {
  const kills = Number(process.env.BENCH_KILLS ?? 50);
  const batch = 10;
  const database = await benchDatabase();
  const db = connect(database.url, { max: 5 });
  const worker = spawnScript(child, { args: ['worker', database.url] });
  try {
    await worker.waitFor(/WORKER READY/, 60_000);
    const seconds: number[] = [];
    for (let first = 0; first < kills; first += batch) {
      const keys = Array.from({ length: Math.min(batch, kills - first) }, (_, i) => `kill-${first + i}`);
      const victims = keys.map((key) => ({ key, process: spawnScript(child, { args: ['run', database.url, key] }) }));
      const killedAt = new Map<string, number>();
      await Promise.all(
        victims.map(async ({ key, process }) => {
          await process.waitFor(/HOLDING/, 60_000);
          process.kill('SIGKILL');
          killedAt.set(key, performance.now());
          await process.exited;
        }),
      );
      const pending = new Set(keys);
      while (pending.size > 0) {
        const done = await db.sql<{ key: string }[]>`
          select key from stepkey.ledger where scope = 'bench' and key in ${db.sql([...pending])} and status = 'completed'`;
        for (const { key } of done) {
          seconds.push((performance.now() - killedAt.get(key)!) / 1000);
          pending.delete(key);
        }
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }
    seconds.sort((a, b) => a - b);
    printTable(
      `Recovery after SIGKILL (${kills} kills in batches of ${batch}; lease 8 s, sweep every 1 s: the defaults)`,
      ['measure', 'seconds'],
      [
        ['p50', percentile(seconds, 50)],
        ['p99', percentile(seconds, 99)],
        ['max', seconds[seconds.length - 1] ?? 0],
      ],
    );
  } finally {
    worker.kill('SIGKILL');
    await db.close();
    await database.close();
  }
}
