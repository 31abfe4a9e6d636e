/**
 * `npm start`'s supervision (workflows/supervisor/supervise.ts) with real
 * processes: a service SIGKILLed twice is restarted each time, with the
 * backoff doubling (0.5 s, then 1 s); one that hangs (SIGSTOP: alive, its
 * health probe unanswered) is killed once its probe has failed for the time
 * set (30 s here: a live service on a busy host never fails its probe that
 * long) and restarted; every decision is logged; stopping supervision stops
 * the service.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { processAlive } from '../../src/embedded/process-alive.js';
import { httpProbe } from '../../workflows/supervisor/probes.js';
import { startService } from '../../workflows/supervisor/service-process.js';
import { supervise, type Supervised } from '../../workflows/supervisor/supervise.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const pids = new Set<number>();
let supervised: Supervised | undefined;

afterAll(async () => {
  await supervised?.stop(2_000);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGCONT');
      process.kill(-pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
});

describe('a supervised service', () => {
  it('is restarted every time it dies, and when it stops answering its health probe', async () => {
    const log: string[] = [];
    supervised = supervise(
      {
        name: 'svc',
        start: () =>
          startService('svc', 'test/helpers/scripts/health-service.ts', { cwd: root, env: {}, ready: /LISTENING (\S+)/, timeoutMs: PATIENCE_MS }),
        probe: ({ match }) => httpProbe(`${match[1]!}/health`),
      },
      // The backoff starts over only after an hour of health: never while this test runs.
      { log: (line) => log.push(line), unhealthyAfterMs: 30_000, resetAfterMs: 3_600_000 },
    );
    const running = () => supervised!.current()?.service.pid;
    const first = (await supervised.first).service.pid;
    pids.add(first);

    const replaced = async (old: number) => {
      await expect.poll(() => running() !== undefined && running() !== old, { interval: 100 }).toBe(true);
      const pid = running()!;
      pids.add(pid);
      return pid;
    };

    process.kill(first, 'SIGKILL');
    const second = await replaced(first);
    process.kill(second, 'SIGKILL');
    const third = await replaced(second);
    expect(log).toContainEqual('svc: exited on SIGKILL; restarting in 0.5 s');
    expect(log).toContainEqual('svc: exited on SIGKILL; restarting in 1 s');

    // Hung: alive, but its health route never answers.
    process.kill(third, 'SIGSTOP');
    const fourth = await replaced(third);
    expect(processAlive(third)).toBe(false);
    const killed = log.map((line) => /^svc: its health probe has failed for (\d+) s: it stopped working; killing pid (\d+)$/.exec(line)).filter(Boolean);
    expect(killed.map((match) => Number(match![2]))).toEqual([third]);
    expect(Number(killed[0]![1])).toBeGreaterThanOrEqual(30);
    expect(log).toContainEqual('svc: stopped working; restarting in 2 s');
    expect(supervised.restarts).toBe(3);
    await expect.poll(() => httpProbe(`${supervised!.current()!.match[1]!}/health`)).toBe('healthy');

    await supervised.stop(5_000);
    expect(processAlive(fourth)).toBe(false);
    expect(supervised.current()).toBeUndefined();
  });
});
