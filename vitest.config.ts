import { defineConfig } from 'vitest/config';

export default defineConfig({
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
