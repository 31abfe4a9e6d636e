/**
 * The child side of the crash kit. Loads a scenario module and either runs
 * its workflow for one key, or consumes effects as a worker:
 *
 *   node --import tsx crash-runner.ts <scenario module> run <db url> <scope> <key>
 *        → prints STEPKEY_RESULT <json> (or STEPKEY_ERROR <message>, or STEPKEY_REVIEW
 *          when the run stopped for review)
 *   node --import tsx crash-runner.ts <scenario module> worker <db url>
 *        → prints STEPKEY_WORKER_READY, runs until SIGTERM
 *
 * Fault points armed through STEPKEY_FAULTS kill it with SIGKILL where they fire.
 */
import { pathToFileURL } from 'node:url';
import { connect } from '../db/connect.js';
import { runWorker } from '../worker/run-worker.js';
import { createEngine } from '../engine/engine.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { CrashScenario } from './scenario.js';

const [modulePath, mode, url, scope, key] = process.argv.slice(2) as [string, string, string, string, string];
const loaded = (await import(pathToFileURL(modulePath).href)) as { default?: CrashScenario };
const scenario = loaded.default;
if (!scenario?.workflow) throw new Error(`${modulePath} must export default defineCrashScenario({...})`);
const workflows = scenario.workflows ?? [scenario.workflow];
const database = connect(url, { max: 5 });

if (mode === 'run') {
  const engine = createEngine({ database, workflows, onError: () => {} });
  // Like a client: a run executing elsewhere, or an answer that says retry (this process lost the
  // lease to another — a stalled event loop on a busy host does that), is asked again, within the kit's patience.
  const deadline = Date.now() + Number(process.env.STEPKEY_CRASH_PATIENCE_MS ?? 60_000);
  const ask = async (ref: { scope: string; key: string }) => {
    for (;;) {
      try {
        return await engine.attempt(scenario.workflow, ref, scenario.input(ref) as never);
      } catch (error) {
        if (!(error instanceof StepkeyError && error.retryable) || Date.now() > deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  try {
    const ref = { scope, key };
    for (;;) {
      const attempt = await ask(ref);
      if (attempt.state === 'completed') {
        console.log(`STEPKEY_RESULT ${JSON.stringify(attempt.output ?? null)}`);
        break;
      }
      if (attempt.state === 'running' || attempt.state === 'needs_review' || attempt.state === 'waiting') {
        if ((await engine.get(ref))?.status === 'needs_review') {
          console.log('STEPKEY_REVIEW');
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
        continue;
      }
      console.log(`STEPKEY_ERROR ${attempt.state === 'errored' ? attempt.error.message : attempt.state}`);
      break;
    }
  } catch (error) {
    console.log(`STEPKEY_ERROR ${error instanceof Error ? error.message : String(error)}`);
  }
  await engine.shutdown();
  await database.close();
} else if (mode === 'worker') {
  await runWorker({ database, workflows, effects: scenario.effects ?? [], handleSignals: true, onError: () => {} });
  console.log('STEPKEY_WORKER_READY');
} else {
  throw new Error(`unknown mode '${mode}'`);
}
