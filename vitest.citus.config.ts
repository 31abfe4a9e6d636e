import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

// The Citus stage (.ci/run): the files below, each on a database of its own distributed by scope over a
// 3-node cluster (test/citus/), at most two at once. STEPKEY_CITUS_URL and STEPKEY_CITUS_WORKERS name it.
export const citusFiles = [
  // claim, replay, mismatch, duplicate; a transaction step's rows and its key together
  'test/integration/ledger-claim.test.ts',
  'test/integration/ledger-once.test.ts',
  // runs: start, replay, a sleep's wake, an event sent, a child
  'test/integration/engine-basics.test.ts',
  'test/integration/waits-timers.test.ts',
  'test/integration/waits-events.test.ts',
  'test/integration/waits-children.test.ts',
  // a queue's dispatch, a limit
  'test/integration/flow-queues.test.ts',
  'test/integration/flow-limits.test.ts',
  // a cancel of a tree; the purge of expired keys
  'test/integration/cancel-tree.test.ts',
  'test/integration/key-lifetime.test.ts',
  'test/integration/ledger-expiry.test.ts',
  // an effect delivered once; a takeover after SIGKILL
  'test/integration/outbox.test.ts',
  'test/e2e/engine-crash.test.ts',
];

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    // STEPKEY_CITUS_LAST: the file run after the others (its rows asserted on both workers).
    include: process.env.STEPKEY_CITUS_LAST ? ['test/citus/spread.test.ts'] : citusFiles,
    exclude: ['node_modules/**'],
    globalSetup: ['test/citus/global-setup.ts'],
    maxWorkers: 2,
  },
});
