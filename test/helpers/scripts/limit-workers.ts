/**
 * Workflows with step limits and the worker processes of the limit e2e tests.
 *
 *   node --import tsx limit-workers.ts work <db> <kind> <prefix> <from> <to> <per-second>
 *
 * sweeps until killed (prints READY), and starts runs <prefix>-<from> … <to>-1
 * of workflow <kind> at <per-second> (prints STARTED). Kinds:
 *
 *   rate    one tx step under a 50-per-second limit, recording when it was granted in limit_e2e
 *   conc    one call step under a limit of 3 at once, recording its interval in flow_intervals
 *   crash   one tx step under a limit of 2 at once that records itself and takes 400 ms
 *           (prints HOLD <key> inside it)
 */
import { z } from 'zod';
import { connect } from '../../../src/db/connect.js';
import { defineLimit } from '../../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { createEngine } from '../../../src/engine/engine.js';
import { recordEnd, recordStart } from '../flow.js';

export const RATE = { limit: 50, periodMs: 1_000 };
/**
 * With slots too — a thousand, never the bound — so that each grant's time is on record (its slot's
 * granted_at, written by the statement that took the token): a step records when it was granted,
 * however long a busy host takes from the grant to the step.
 */
export const rateLimit = defineLimit({ name: 'e2e-rate', rateLimit: RATE, concurrency: 1_000 });
export const concLimit = defineLimit({ name: 'e2e-conc', concurrency: 3 });
export const crashLimit = defineLimit({ name: 'e2e-crash', concurrency: 2 });

const input = z.object({ n: z.number() });

export const rated = defineWorkflow({
  name: 'e2e-rate',
  version: 1,
  input,
  steps: { call: step('rated-call.v1', { limit: rateLimit }) },
  async run({ steps, ctx }) {
    await steps.call.tx(async (_db, { sql }) => {
      const [row] = await sql`
        insert into limit_e2e (run, pid, at)
        select ${ctx.key}, ${process.pid}, granted_at from stepkey.limit_slots
         where scope = ${ctx.scope} and key = ${ctx.key} and limit_name = 'e2e-rate'
        returning 1`;
      if (!row) throw new Error(`run '${ctx.key}' holds no grant of e2e-rate`);
    });
    return 'done';
  },
});

export const concurrent = defineWorkflow({
  name: 'e2e-conc',
  version: 1,
  input,
  steps: { call: step('conc-call.v1', { limit: concLimit }) },
  async run({ input, steps, ctx }) {
    await steps.call.call(async () => {
      const id = await recordStart(sql, ctx.key, 'all');
      await new Promise((resolve) => setTimeout(resolve, 30 + (input.n % 5) * 10));
      await recordEnd(sql, id);
    });
    return 'done';
  },
});

export const crashing = defineWorkflow({
  name: 'e2e-crash',
  version: 1,
  input,
  steps: { hold: step('crash-hold.v1', { limit: crashLimit }) },
  async run({ steps, ctx }) {
    await steps.hold.tx(async (_db, { sql }) => {
      await sql`insert into limit_e2e (run, pid, at) values (${ctx.key}, ${process.pid}, clock_timestamp())`;
      console.log(`HOLD ${ctx.key}`);
      await sql`select pg_sleep(0.4)`;
    });
    return 'done';
  },
});

const [mode, url, kind, prefix, from, to, perSecond] = process.argv.slice(2) as string[];
const database = connect(url!, { max: 8 });
const sql = database.sql;

async function main(): Promise<void> {
  const engine = createEngine({
    database,
    workflows: [rated, concurrent, crashing],
    limits: [rateLimit, concLimit, crashLimit],
    maxConcurrentRuns: 8,
    onError: () => {},
  });
  if (mode !== 'work') throw new Error(`unknown mode ${mode}`);
  engine.startSweeper();
  console.log('READY');
  const workflow = kind === 'rate' ? rated : kind === 'conc' ? concurrent : crashing;
  const gap = 1_000 / Number(perSecond);
  const begun = Date.now();
  for (let n = Number(from); n < Number(to); n += 1) {
    await engine.start(workflow, { scope: 'e2e', key: `${prefix}-${n}` }, { n });
    const due = begun + (n - Number(from) + 1) * gap;
    if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
  }
  console.log('STARTED');
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
