/**
 * For the recovery benchmark: `run <db> <key>` starts a run whose first step
 * holds (prints HOLDING) until the process is killed; `worker <db>` runs the
 * sweeper that resumes such runs (the step then returns at once).
 */
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { createEngine } from '../../src/engine/engine.js';

const [mode, url, key] = process.argv.slice(2) as [string, string, string | undefined];
const holding = mode === 'run';

const held = defineWorkflow({
  name: 'bench-held',
  version: 1,
  input: z.object({}),
  steps: { hold: step('hold.v1', { timeoutMs: 120_000 }) },
  async run({ steps }) {
    await steps.hold.call(async () => {
      if (holding) {
        console.log('HOLDING');
        await new Promise((resolve) => setTimeout(resolve, 120_000));
      }
      return 'held';
    });
    return 'done';
  },
});

const database = connect(url, { max: 4 });
if (mode === 'run') {
  const engine = createEngine({ database, workflows: [held], onError: () => {} });
  await engine.start(held, { scope: 'bench', key: key! }, {});
  setInterval(() => {}, 60_000);
} else {
  await runWorker({ database, workflows: [held], purgeSchedule: false, onError: () => {} });
  console.log('WORKER READY');
}
