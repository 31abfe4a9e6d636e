/**
 * stepkey's Prometheus metrics (prom-client), in a registry of its own that
 * an app can serve or merge with its own. The counters and the histogram
 * count what happens in this process — they subscribe to the
 * instrumentation hook (telemetry/instrumentation.ts) when this module is
 * loaded; the gauges read the database at scrape time (database.ts).
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { observe } from '../telemetry/instrumentation.js';

/** The registry holding every stepkey metric. */
export const registry = new Registry();

const runLabels = ['workflow', 'version'] as const;

export const runsStarted = new Counter({
  name: 'stepkey_runs_started_total',
  help: 'Runs whose first execution began in this process.',
  labelNames: runLabels,
  registers: [registry],
});

export const runsCompleted = new Counter({
  name: 'stepkey_runs_completed_total',
  help: 'Runs that completed in this process, their output stored.',
  labelNames: runLabels,
  registers: [registry],
});

export const runsFailed = new Counter({
  name: 'stepkey_runs_failed_total',
  help: 'Executions that ended failed: retries ran out or an unexpected error (resumable).',
  labelNames: runLabels,
  registers: [registry],
});

export const runsErrored = new Counter({
  name: 'stepkey_runs_errored_total',
  help: 'Runs ended by a stored (deterministic) error, replayed to every retry.',
  labelNames: runLabels,
  registers: [registry],
});

export const stepDuration = new Histogram({
  name: 'stepkey_step_duration_seconds',
  help: 'Time a step took to its outcome in this process, all its attempts and backoff included (replays not counted).',
  labelNames: ['step', 'outcome'],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [registry],
});

export const sweeperTakeovers = new Counter({
  name: 'stepkey_sweeper_takeovers_total',
  help: "Runs this process's sweeper took over: their lease had expired (a process died), an operator made them due, or their wait came due.",
  registers: [registry],
});

export const replays = new Counter({
  name: 'stepkey_trpc_replays_total',
  help: 'Keyed calls (tRPC procedures, stepkey/http handlers and routes) answered from the stored outcome.',
  labelNames: ['via'],
  registers: [registry],
});

export const answers = new Counter({
  name: 'stepkey_trpc_answers_total',
  help: 'Keyed calls (tRPC procedures, stepkey/http handlers and routes) refused or failed, by HTTP status: 409 in progress or taken over, 422 key reused, 503 database unavailable.',
  labelNames: ['status'],
  registers: [registry],
});

observe({
  runStarted: ({ workflow, version }) => runsStarted.inc({ workflow, version: String(version) }),
  runEnded: ({ workflow, version, outcome }) => {
    const labels = { workflow, version: String(version) };
    if (outcome === 'completed') runsCompleted.inc(labels);
    else if (outcome === 'errored') runsErrored.inc(labels);
    else if (outcome === 'failed') runsFailed.inc(labels);
  },
  stepEnded: ({ step, outcome, durationMs }) => stepDuration.observe({ step, outcome }, durationMs / 1000),
  sweptRuns: ({ count }) => sweeperTakeovers.inc(count),
  replayed: ({ via }) => replays.inc({ via }),
  answered: ({ status }) => answers.inc({ status: String(status) }),
});
