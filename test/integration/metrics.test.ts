/**
 * stepkey/metrics after real work: runs that complete, fail and end with a
 * stored error, step durations, a sweeper takeover, tRPC replays and 409 /
 * 422 answers over HTTP, an outbox job failed for good — scraped over HTTP
 * from serveMetrics and from the dashboard's /metrics. And what must not
 * load prom-client: `import 'stepkey'`, the engine, the tRPC layer, the worker.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDashboard } from '../../src/dashboard/dashboard.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { collectDatabaseMetrics, serveMetrics, type MetricsServer } from '../../src/metrics/index.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { makeInProgress } from '../helpers/cli-fixtures.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { counters, gate, serveApp, type ServedApp } from '../helpers/trpc-app.js';

const db = useTestDatabase({ max: 12 });

const metered = defineWorkflow({
  name: 'metered',
  version: 3,
  input: z.object({ mode: z.enum(['ok', 'fail', 'refuse']) }),
  steps: { work: step('work.v1', { retry: { attempts: 2, initialDelayMs: 5 } }) },
  async run({ input, steps }) {
    return steps.work.tx(async () => {
      if (input.mode === 'fail') throw new Error('flaky dependency');
      if (input.mode === 'refuse') throw new NonRetryableError('not allowed');
      return 'done';
    });
  },
});

const bounced = defineEffect({
  name: 'metrics.bounced',
  payload: z.object({ n: z.number() }),
  maxAttempts: 1,
  async handler() {
    throw new Error('receiver down');
  },
});

let server: MetricsServer;
let served: ServedApp;
beforeAll(async () => {
  server = await serveMetrics();
  served = await serveApp(db());
  collectDatabaseMetrics(db(), { minIntervalMs: 0 });
});
afterAll(async () => {
  await server.close();
  await served.close();
});

/** Every sample of the scrape, `name{labels}` → value. */
async function scrape(url: string): Promise<Map<string, number>> {
  const response = await fetch(url);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  const samples = new Map<string, number>();
  for (const line of (await response.text()).split('\n')) {
    const match = /^(\w+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) samples.set(match[1]!, Number(match[2]));
  }
  return samples;
}

const value = (samples: Map<string, number>, name: string) => samples.get(name) ?? 0;

describe('the metrics after real work', () => {
  it('counts runs, steps, takeovers, replays and answers, and reads the gauges from the database', async () => {
    const before = await scrape(server.url);
    const engine = testEngine(db(), [metered]);
    await engine.run(metered, { scope: 'm', key: uniqueKey('ok') }, { mode: 'ok' });
    await expect(engine.run(metered, { scope: 'm', key: uniqueKey('fail') }, { mode: 'fail' })).rejects.toThrow(/flaky dependency/);
    await expect(engine.run(metered, { scope: 'm', key: uniqueKey('refuse') }, { mode: 'refuse' })).rejects.toThrow(/not allowed/);
    // A run whose process died: its lease expired, the sweeper takes it over.
    const dead = uniqueKey('dead');
    await engine.run(metered, { scope: 'm', key: dead }, { mode: 'ok' });
    await makeInProgress(db(), 'm', dead, -5);
    expect(await engine.sweep()).toBe(1);
    await expect.poll(async () => (await engine.get({ scope: 'm', key: dead }))?.status).toBe('completed');

    // tRPC over HTTP: a replay, a 422, and a 409 while the first call still works.
    const headers = (key: string) => ({ authorization: 'Bearer tenant-m', 'idempotency-key': `"${key}"` });
    const key = uniqueKey('trpc');
    expect((await post(served.url, 'orders.create', { sku: 'm1', quantity: 1 }, headers(key))).status).toBe(200);
    expect((await post(served.url, 'orders.create', { sku: 'm1', quantity: 1 }, headers(key))).headers.get('idempotent-replayed')).toBe('true');
    expect((await post(served.url, 'orders.create', { sku: 'm1', quantity: 2 }, headers(key))).status).toBe(422);
    const slow = uniqueKey('slow');
    const creates = counters.create;
    const first = post(served.url, 'orders.create', { sku: 'm2', quantity: 1, gate: slow }, headers(slow));
    // The first call is inside its resolver (holding the key) before the duplicate is sent.
    await expect.poll(() => counters.create).toBe(creates + 1);
    expect((await post(served.url, 'orders.create', { sku: 'm2', quantity: 1, gate: slow }, headers(slow))).status).toBe(409);
    gate(slow).open();
    expect((await first).status).toBe(200);

    // A job that fails for good.
    const worker = await runWorker({ database: db(), effects: [bounced], engine: testEngine(db(), []), concurrency: 2, purgeSchedule: false, onError: () => {} });
    await enqueueEffect(db().sql, bounced, { n: 1 }, { scope: 'm', key: uniqueKey('job') });
    await expect.poll(async () => (await db().sql`select count(*)::int as n from graphile_worker.jobs where attempts >= max_attempts`)[0]!.n).toBe(1);
    await worker.stop();
    await engine.shutdown();

    const after = await scrape(server.url);
    const delta = (name: string) => value(after, name) - value(before, name);
    const run = 'workflow="metered",version="3"';
    expect(delta(`stepkey_runs_started_total{${run}}`)).toBe(4);
    expect(delta(`stepkey_runs_completed_total{${run}}`)).toBe(3);
    expect(delta(`stepkey_runs_failed_total{${run}}`)).toBe(1);
    expect(delta(`stepkey_runs_errored_total{${run}}`)).toBe(1);
    expect(delta('stepkey_step_duration_seconds_count{step="work.v1",outcome="completed"}')).toBe(2);
    expect(delta('stepkey_step_duration_seconds_count{step="work.v1",outcome="failed"}')).toBe(1);
    expect(delta('stepkey_step_duration_seconds_count{step="work.v1",outcome="errored"}')).toBe(1);
    expect(value(after, 'stepkey_step_duration_seconds_sum{step="work.v1",outcome="completed"}')).toBeGreaterThan(0);
    expect(delta('stepkey_sweeper_takeovers_total')).toBe(1);
    expect(delta('stepkey_trpc_replays_total{via="procedure"}')).toBe(1);
    expect(delta('stepkey_trpc_answers_total{status="422"}')).toBe(1);
    expect(delta('stepkey_trpc_answers_total{status="409"}')).toBe(1);
    // Open runs only: the one whose retries ran out (resumable); the one a stored error ended is final.
    expect(value(after, 'stepkey_runs{status="failed"}')).toBe(1);
    expect(value(after, 'stepkey_runs{status="running"}')).toBe(0);
    expect(value(after, 'stepkey_outbox_jobs{status="failed"}')).toBe(1);
    expect(after.has('stepkey_outbox_oldest_pending_seconds')).toBe(true);
    expect(value(after, 'stepkey_worker_pools{state="stopped"}')).toBe(1);
  });

  it("serves the same registry on the dashboard's /metrics", async () => {
    const dashboard = createDashboard({ database: db(), onError: () => {} });
    try {
      const response = await dashboard.fetch(new Request('http://127.0.0.1/metrics'));
      expect(response.status).toBe(200);
      const text = await response.text();
      expect(text).toContain('# TYPE stepkey_runs_started_total counter');
      expect(text).toMatch(/^stepkey_outbox_jobs\{status="failed"\} 1$/m);
    } finally {
      await dashboard.close();
    }
  });
});

describe('what stays free of prom-client', () => {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const imports = (file: string) =>
    [...readFileSync(file, 'utf8').matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'([^']+)'|import\('([^']+)'\)/g)].map((m) => m[1] ?? m[2]!);
  /** Every module `entry` loads statically (dynamic imports are loaded on use only). */
  function graph(entry: string): Set<string> {
    const seen = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(file, 'utf8');
      for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)(?!\s+type)[^'"]*?from\s+'([^']+)'/g)) {
        const spec = match[1]!;
        if (spec.startsWith('.')) visit(resolve(dirname(file), spec.replace(/\.js$/, '.ts')));
        else seen.add(spec);
      }
    };
    visit(entry);
    return seen;
  }

  it("`import 'stepkey'` and stepkey/trpc never load prom-client or the metrics module", () => {
    // The walk does find prom-client where it is loaded.
    expect([...graph(join(root, 'src/metrics/index.ts'))]).toContain('prom-client');
    for (const entry of ['src/index.ts', 'src/trpc/index.ts', 'src/dashboard/index.ts']) {
      const loaded = [...graph(join(root, entry))];
      expect(loaded.filter((spec) => spec === 'prom-client' || spec.includes('/src/metrics/'))).toEqual([]);
    }
  });

  it('the engine, the tRPC layer and the worker import no telemetry library (tracing names only its types)', () => {
    expect(imports(join(root, 'src/metrics/registry.ts'))).toContain('prom-client');
    // The API is loaded on use, once an SDK has registered (see telemetry/tracing.ts): only a type import is written.
    const tracing = join(root, 'src/telemetry/tracing.ts');
    expect(imports(tracing)).toContain('@opentelemetry/api');
    expect([...graph(tracing)].filter((spec) => spec.includes('opentelemetry'))).toEqual([]);
    for (const folder of ['src/workflow', 'src/trpc', 'src/worker', 'src/telemetry']) {
      const files = readdirSync(join(root, folder), { recursive: true, encoding: 'utf8' })
        .map((name) => join(root, folder, name))
        .filter((file) => file.endsWith('.ts') && statSync(file).isFile());
      for (const file of files) {
        const allowed = file === tracing ? ['@opentelemetry/api'] : [];
        expect(imports(file).filter((spec) => /prom-client|opentelemetry|\/metrics\//.test(spec) && !allowed.includes(spec)), file).toEqual([]);
      }
    }
  });
});
