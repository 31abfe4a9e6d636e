/**
 * The CLI as a real process: `node --import tsx src/cli/main.ts …`, the way
 * the package bin runs it. A worker consumes an effect until SIGTERM and exits
 * 0; a one-shot command exits on its own.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { childKey } from '../../src/keys/derive.js';
import { spawnScript } from '../../src/testing/child-process.js';
import { appModule, runCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { checkout, workflows } from '../helpers/scripts/cli-app.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const cliFile = 'src/cli/main.ts';

describe('stepkey worker', () => {
  it('consumes the effects of the app module, shows the delivery in inspect, and exits 0 on SIGTERM', async () => {
    const worker = spawnScript(cliFile, {
      args: ['worker', '--app', appModule('cli-app'), '--database', db().url, '--concurrency', '2'],
      env: { STEPKEY_LEASE_MS: '2000', DATABASE_URL: undefined },
    });
    try {
      const [, poolId] = await worker.waitFor(/stepkey worker pool (\S+) running on .*: 3 workflow versions, 2 effects, 0 schedules, 0 queues, 0 step limits, concurrency 2/, PATIENCE_MS);
      const pools = await db().sql`select count(*)::int as n from stepkey.worker_pools where pool_id = ${poolId!}`;
      expect(pools[0]!.n).toBe(1);

      const ref = { scope: 'worker-acme', key: uniqueKey('order') };
      const engine = testEngine(db(), workflows);
      await engine.run(checkout, ref, { cents: 900 });
      await engine.shutdown();
      const messageKey = childKey(await storedRoot(db(), ref), 'confirm.v1');
      for (const deadline = Date.now() + PATIENCE_MS; ; ) {
        const [row] = await db().sql`select 1 from stepkey.inbox where consumer = 'cli.notify' and message_key = ${messageKey}`;
        if (row) break;
        if (Date.now() > deadline) throw new Error(`the worker did not consume the job; output:\n${worker.output()}`);
        await sleep(50);
      }
      const inspected = await runCli(['inspect', ref.key, '--scope', ref.scope, '--database', db().url]);
      expect(inspected.stdout).toContain("delivered to consumer 'cli.notify' at ");

      worker.kill('SIGTERM');
      expect(await worker.exited).toEqual({ code: 0, signal: null });
    } finally {
      worker.kill('SIGKILL');
    }
  });

  it('runs a one-shot command as a process that exits by itself', async () => {
    const runs = spawnScript(cliFile, { args: ['runs', '--json', '--database', db().url] });
    expect(await runs.exited).toEqual({ code: 0, signal: null });
    expect(JSON.parse(runs.output())).toHaveProperty('runs');
    const usage = spawnScript(cliFile, { args: ['runs', '--nope'] });
    expect((await usage.exited).code).toBe(2);
    expect(usage.output()).toBe("stepkey: Unknown option '--nope'. (see: stepkey runs --help)\n");
  });
});
