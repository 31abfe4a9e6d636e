/**
 * Sweepers of a backlog on one PostgreSQL do not wait for each other: a due
 * run whose row another transaction holds (another sweeper taking it) is
 * skipped, the rest of the batch is taken, and the skipped run is taken by a
 * later sweep once its row is free — each run once.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { onCitus, useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const HOUR = 60 * 60 * 1000;
const after = new Map<string, number>();

const sleeper = defineWorkflow({
  name: 'sweep-skip-sleeper',
  version: 1,
  input: z.object({ id: z.string() }),
  steps: { rest: step('rest.v1'), after: step('after.v1') },
  async run({ input, steps }) {
    await steps.rest.sleep(HOUR);
    await steps.after.call(async () => after.set(input.id, (after.get(input.id) ?? 0) + 1));
    return 'done';
  },
});

describe('the sweep on one PostgreSQL', () => {
  it.skipIf(onCitus())('skips a due run whose row is locked, takes the rest, and takes it later, once', async () => {
    const engine = testEngine(db(), [sleeper]);
    try {
      const refs = Array.from({ length: 4 }, (_, i) => ({ scope: 'acme', key: uniqueKey(`skip-${i}`) }));
      for (const ref of refs) await engine.attempt(sleeper, ref, { id: ref.key });
      engine.clock.advance(HOUR + 1_000);
      const held = refs[0]!;
      const holder = await db().sql.reserve();
      try {
        await holder`begin`;
        await holder`select 1 from stepkey.ledger where scope = ${held.scope} and key = ${held.key} for update`;
        // With the row held, the sweep still returns: it takes the three others and waits for none.
        expect(await engine.sweep()).toBe(3);
      } finally {
        await holder`rollback`;
        holder.release();
      }
      expect(await engine.sweep()).toBe(1);
      for (const ref of refs) await expect.poll(() => after.get(ref.key)).toBe(1);
    } finally {
      await engine.shutdown({ timeoutMs: 5_000 });
    }
  });
});
