import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

// The Citus stage (.ci/run): the files below, each on a database of its own distributed by scope over a
// 3-node cluster (test/citus/), at most two at once. STEPKEY_CITUS_URL and STEPKEY_CITUS_WORKERS name it.
export const citusFiles = [
  // claim, replay, mismatch, duplicate; a transaction step's rows and its key together
  'test/integration/ledger-claim.test.ts',
  'test/integration/ledger-once.test.ts',
  // runs: start, replay, mismatch; an event sent; a child; a cancel of a tree
  'test/integration/engine-basics.test.ts',
  'test/integration/waits-events.test.ts',
  'test/integration/waits-children.test.ts',
  'test/integration/cancel-tree.test.ts',
  // queues: dispatch in order, by partition, rated; a slot given back; a failed queued run resumed (also one written before an upgrade); a child on a queue
  'test/integration/flow-queues.test.ts',
  'test/integration/flow-requeue.test.ts',
  'test/integration/flow-requeue-upgrades.test.ts',
  'test/integration/queued-children.test.ts',
  // step limits: slots and tokens taken on the coordinator, given back when a step is recorded, a run ends, fails, parks or is cancelled; bad input
  'test/integration/flow-limits.test.ts',
  'test/integration/flow-limits-input.test.ts',
  // an effect enqueued with its step and delivered once
  'test/integration/outbox.test.ts',
  // the purge of expired keys; a key reused after its retention
  'test/integration/ledger-expiry.test.ts',
  'test/integration/key-lifetime.test.ts',
  // a takeover after SIGKILL
  'test/e2e/engine-crash.test.ts',
]

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    // STEPKEY_CITUS_LAST: the files run after the others, one at a time: the kill test (it restarts a
    // worker node) and the spread (rows asserted on both workers).
    include: process.env.STEPKEY_CITUS_LAST ? ['test/citus/kill.test.ts', 'test/citus/spread.test.ts'] : citusFiles,
    ...(process.env.STEPKEY_CITUS_LAST ? { fileParallelism: false } : {}),
    exclude: ['node_modules/**'],
    globalSetup: ['test/citus/global-setup.ts'],
    maxWorkers: 2,
  },
});
