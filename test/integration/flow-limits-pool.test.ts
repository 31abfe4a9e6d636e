/**
 * A step limit's first acquire in an engine writes the limits' settings
 * through the pool. Runs that reach it with a transaction open (their start,
 * a tx step) commit it first: with more such runs than connections, none
 * waits for a connection another one holds, and every run completes.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect } from '../../src/db/connect.js';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { limitHeld } from '../helpers/limits.js';

const db = useTestDatabase();

const narrow = defineLimit({ name: 'lim-first', concurrency: 2 });
const workflow = defineWorkflow({
  name: 'lim-first-acquire',
  version: 1,
  input: z.object({}),
  steps: { before: step('before.v1'), call: step('call.v1', { limit: narrow }) },
  async run({ steps }) {
    // The start and this tx step stay open until the next step's commit: the limited step's acquire.
    await steps.before.tx(async () => 'ok');
    return steps.call.call(async () => 'called');
  },
});

describe('a step limit’s first acquire', () => {
  it('completes every run when more runs reach it with a transaction open than the pool has connections', async () => {
    const small = Object.assign(connect(db().url, { max: 3 }), { name: db().name });
    const e = testEngine(small, [workflow], { limits: [narrow], maxConcurrentRuns: 8 });
    try {
      const refs = Array.from({ length: 8 }, (_, i) => ({ scope: 'acme', key: uniqueKey(`first-${i}`) }));
      const results = await Promise.all(refs.map((ref) => e.run(workflow, ref, {})));
      expect(results).toEqual(refs.map(() => 'called'));
      expect(await limitHeld(db().sql, 'lim-first')).toMatchObject({ held: 0, slots: 0, granted: 8 });
    } finally {
      await e.shutdown({ timeoutMs: 5_000 });
      await small.close();
    }
  });
});
