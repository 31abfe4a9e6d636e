/**
 * A deliberately unsafe workflow for the crash kit's own test: its call step
 * writes through a connection of its own, ignoring the derived key — a
 * receiver that does not dedupe. Killed inside the call, the write happens
 * twice, and the kit must say so.
 */
import postgres from 'postgres';
import { z } from 'zod';
import { defineCrashScenario } from '../../../src/testing/scenario.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';

const unsafe = defineWorkflow({
  name: 'unsafe',
  version: 1,
  input: z.object({}),
  steps: { write: step('unsafe-write.v1') },
  async run({ steps, ctx }) {
    await steps.write.call(async ({ key }) => {
      const sql = postgres(process.env.UNSAFE_DB!, { max: 1, onnotice: () => {} });
      await sql`insert into unsafe_writes (run_key, key) values (${ctx.rootKey}, ${key})`;
      await sql.end();
    });
    return 'done';
  },
});

export default defineCrashScenario({ workflow: unsafe, input: () => ({}) });
