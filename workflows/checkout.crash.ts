/**
 * The checkout workflow as a crash scenario for stepkey/testing's crashTest:
 * every order sells one espresso to ada@example.com.
 */
import { defineCrashScenario } from 'stepkey/testing';
import { checkout } from './checkout.js';
import { sendConfirmation } from './effects.js';

export default defineCrashScenario({
  workflow: checkout,
  effects: [sendConfirmation],
  input: () => ({ sku: 'sku-espresso', quantity: 1, email: 'ada@example.com' }),
});
