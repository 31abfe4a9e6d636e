import { defineConfig } from 'vitest/config';
import { PATIENCE_MS } from './test/helpers/patience.js';

// The example and the tests import stepkey by its package name; the `source`
// export condition maps it to src/ (the published exports point at dist/).
// Processes the tests spawn (`node --import tsx …`) inherit it through NODE_OPTIONS.
const sourceCondition = '--conditions=source';
if (!(process.env.NODE_OPTIONS ?? '').includes(sourceCondition)) {
  process.env.NODE_OPTIONS = [process.env.NODE_OPTIONS, sourceCondition].filter(Boolean).join(' ');
}

// stepkey's logs (pino, a dev dependency here) stay quiet unless a test asks for them.
process.env.STEPKEY_LOG_LEVEL ??= 'silent';

// No `module` condition: it points at bundler builds that Node cannot load (OpenTelemetry's have
// imports without file extensions), and the tests resolve packages as Node does in an app.
const conditions = ['source', 'node', 'development|production'];

export default defineConfig({
  environments: { ssr: { resolve: { conditions } }, __vitest__: { resolve: { conditions } } },
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    exclude: ['test/bench/**', 'test/citus/**', 'node_modules/**'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 4,
    // Tests assert what happens, not how fast (test/helpers/patience.ts): their bounds are
    // minutes, so that a host whose cores are all busy fails no test only for being slow.
    testTimeout: 600_000,
    hookTimeout: 600_000,
    teardownTimeout: 180_000,
    expect: { poll: { timeout: PATIENCE_MS, interval: 50 } },
    typecheck: { enabled: false },
  },
});
