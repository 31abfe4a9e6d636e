/**
 * The CLI tests' app after a careless deploy: cli-checkout version 1 renamed
 * its step charge.v1 to charge.v2, and the effect cli.audit is gone.
 */
import { z } from 'zod';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { checkout, checkoutInput, checkoutSteps, gated, notify, refusing } from './cli-app.js';

export const renamedCheckout = defineWorkflow({
  name: 'cli-checkout',
  version: 1,
  input: checkoutInput,
  steps: { ...checkoutSteps, charge: step('charge.v2', { output: z.object({ paymentId: z.string() }) }) },
  run: checkout.run,
});

export const workflows = [renamedCheckout, gated, refusing];
export const effects = [notify];
