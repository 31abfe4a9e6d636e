/**
 * The app module the CLI tests load with --app: a checkout workflow (a tx
 * step, a call step whose key goes downstream, an enqueue step), a workflow
 * that fails until the test opens a gate (for resume), and two effects.
 *
 * `cli-checkout` fails in its confirm step when the input says so, leaving a
 * failed run that finished reserve.v1 and charge.v1. `cli-gated` fails in
 * second.v1 while the table cli_gate holds no open row.
 */
import { z } from 'zod';
import { defineEffect } from '../../../src/outbox/effect.js';
import { NonRetryableError } from '../../../src/ledger/outcome.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { exampleMigrations } from '../../../workflows/db/migrate.js';

export const notify = defineEffect({
  name: 'cli.notify',
  payload: z.object({ note: z.string() }),
  async handler() {},
});

export const audit = defineEffect({
  name: 'cli.audit',
  payload: z.object({ note: z.string() }),
  async handler() {},
});

export const checkoutSteps = {
  reserve: step('reserve.v1'),
  charge: step('charge.v1', { output: z.object({ paymentId: z.string() }) }),
  confirm: step('confirm.v1', { retry: { attempts: 1 } }),
};

export const checkoutInput = z.object({ cents: z.number().int(), failConfirm: z.boolean().default(false) });

export const checkout = defineWorkflow({
  name: 'cli-checkout',
  version: 1,
  input: checkoutInput,
  steps: checkoutSteps,
  async run({ input, steps }) {
    await steps.reserve.tx(async () => 'reserved');
    const { paymentId } = await steps.charge.call(async ({ key }) => ({ paymentId: `pay_${key.slice(0, 8)}` }));
    if (input.failConfirm) await steps.confirm.call(async () => Promise.reject(new Error('mail server down')));
    await steps.confirm.enqueue(notify, { note: `paid ${input.cents}` });
    return { paymentId };
  },
});

export const gated = defineWorkflow({
  name: 'cli-gated',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { first: step('first.v1'), second: step('second.v1', { retry: { attempts: 1 } }) },
  async run({ input, steps }) {
    await steps.first.tx(async () => input.n);
    return steps.second.tx(async (_db, { sql }) => {
      const [open] = await sql`select 1 from cli_gate where open`;
      if (!open) throw new Error('gate closed');
      return input.n * 2;
    });
  },
});

export const refusing = defineWorkflow({
  name: 'cli-refusing',
  version: 1,
  input: z.object({}),
  steps: { only: step('only.v1') },
  async run({ steps }) {
    return steps.only.tx(async () => {
      throw new NonRetryableError('refused for good');
    });
  },
});

export const workflows = [checkout, gated, refusing];
export const effects = [notify, audit];
export const migrations = [exampleMigrations];
