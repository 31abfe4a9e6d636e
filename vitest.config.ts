import { defineConfig } from 'vitest/config';

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
    exclude: ['test/bench/**', 'node_modules/**'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
    typecheck: { enabled: false },
  },
});
