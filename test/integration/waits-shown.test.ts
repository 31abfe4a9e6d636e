/**
 * What a waiting run waits for is shown where an operator looks: `stepkey
 * inspect` names the wait at its step, and when the run is due; the read
 * model says how long it has waited.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const { cli } = useCli(db);

const approval = defineWorkflow({
  name: 'shown-approval',
  version: 1,
  input: z.object({}),
  events: { approved: z.object({}) },
  steps: { ask: step('ask.v1'), approve: step('approve.v1'), nap: step('nap.v1') },
  async run({ steps }) {
    await steps.ask.tx(async () => 'asked');
    await steps.approve.waitForEvent('approved', { timeoutMs: 120_000 });
    await steps.nap.sleep(3_600_000);
    return 'done';
  },
});

describe('a waiting run', () => {
  it('is shown waiting at its step, for what and until when, by stepkey inspect', async () => {
    const engine = testEngine(db(), [approval]);
    try {
      const ref = { scope: 'acme', key: uniqueKey('shown') };
      expect(await engine.attempt(approval, ref, {})).toMatchObject({ state: 'waiting', wait: { kind: 'event', step: 'approve.v1' } });
      const out = (await cli(['inspect', ref.key, '--scope', ref.scope])).stdout;
      const line = out.split('\n').find((l) => l.includes('approve.v1'))!;
      expect(line).toMatch(/waits +at step 'approve\.v1': waiting for event 'approved' · due in [^·]+ · parked/);
      const step = out.split('\n').find((l) => l.includes('─ approve.v1'))!;
      expect(step).toMatch(/approve\.v1 +waiting for event 'approved' · due in/);
      expect(out).not.toMatch(/not recorded \(not reached, or in flight\)/);
      const info = (await engine.get(ref))!;
      expect(info).toMatchObject({ status: 'waiting', wait: { kind: 'event', step: 'approve.v1', for: 'approved' } });
    } finally {
      await engine.shutdown();
    }
  });
});
