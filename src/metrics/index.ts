/**
 * stepkey/metrics: Prometheus metrics through prom-client (an optional peer
 * dependency: install it to use this entry point; `import 'stepkey'` never
 * loads it).
 *
 *   registry                 stepkey's own prom-client registry
 *   metricsHandler()         serve it (and your registries) at /metrics: Node and fetch style
 *   serveMetrics({ port })   a small /metrics server of its own, for a worker process
 *   collectDatabaseMetrics() gauges read from the database at scrape time
 *
 * Loading this module subscribes the counters to stepkey's instrumentation:
 * runs, steps, sweeps, replays and answers of this process are counted from
 * then on.
 */
export {
  registry,
  runsStarted,
  runsCompleted,
  runsFailed,
  runsErrored,
  stepDuration,
  sweeperTakeovers,
  replays,
  answers,
} from './registry.js';
export { collectDatabaseMetrics, type DatabaseMetricsOptions } from './database.js';
export { metricsHandler, type MetricsHandler } from './handler.js';
export { serveMetrics, type MetricsServer } from './serve.js';
