/** The CLI tests' app after a careful deploy: cli-checkout version 2 added beside version 1. */
import { z } from 'zod';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { audit, checkout, checkoutInput, checkoutSteps, gated, notify, refusing } from './cli-app.js';

export const checkoutV2 = defineWorkflow({
  name: 'cli-checkout',
  version: 2,
  input: checkoutInput,
  steps: { ...checkoutSteps, charge: step('charge.v2', { output: z.object({ paymentId: z.string() }) }), receipt: step('receipt.v1') },
  run: checkout.run,
});

export const workflows = [checkout, checkoutV2, gated, refusing];
export const effects = [notify, audit];
