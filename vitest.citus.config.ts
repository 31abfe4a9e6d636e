import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

// The Citus stage (.ci/run): the files below, each on a database of its own distributed by scope over a
// 3-node cluster (test/citus/), at most two at once. STEPKEY_CITUS_URL and STEPKEY_CITUS_WORKERS name it.
export const citusFiles = [
  'test/integration/ledger-claim.test.ts',
  'test/integration/ledger-once.test.ts',
];

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: citusFiles,
    exclude: ['node_modules/**'],
    globalSetup: ['test/citus/global-setup.ts'],
    maxWorkers: 2,
  },
});
