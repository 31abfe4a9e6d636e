/**
 * A workflow procedure on a queue, `idempotency.workflow(w, { queue })`, over
 * real HTTP: a full queue answers 202 as for a run that waits (the same body
 * on every repeat, marked as a replay), the result is fetched later by
 * status and by replay; a free slot runs the call at once; concurrent
 * duplicates with one key enqueue one run; a changed payload is 422; an
 * unknown queue is a clear error and stores nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { z } from 'zod';
import { defineQueue } from '../../src/flow/define-queue.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { answersWaiting } from '../../src/trpc/workflow-procedure.js';
import { createWorkflowRouter } from '../../src/trpc/workflow-router.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { isStepkeyError } from '../../src/errors/stepkey-error.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS } from '../helpers/patience.js';
import { listen } from '../helpers/trpc-app.js';

const db = useTestDatabase();

/** Runs whose input names a gate wait in their step until the test opens it; executions are counted per key. */
const gates = new Map<string, { promise: Promise<void>; open: () => void }>();
function gate(name: string) {
  let entry = gates.get(name);
  if (!entry) {
    let open!: () => void;
    const promise = new Promise<void>((resolve) => (open = resolve));
    entry = { promise, open };
    gates.set(name, entry);
  }
  return entry;
}
const executions = new Map<string, number>();

const report = defineWorkflow({
  name: 'trpc-queued-report',
  version: 1,
  input: z.object({ month: z.string(), gate: z.string().optional() }),
  output: z.object({ month: z.string(), rows: z.number() }),
  // Held at a gate the test opens: no attempt timeout cuts it first, however long a busy host takes.
  steps: { build: step('build-report.v1', { timeoutMs: LONG_LEASE_MS }) },
  async run({ input, steps, ctx }) {
    await steps.build.call(async () => {
      executions.set(ctx.key, (executions.get(ctx.key) ?? 0) + 1);
      if (input.gate) await gate(input.gate).promise;
    });
    return { month: input.month, rows: input.month.length };
  },
});
const reports = defineQueue({ name: 'trpc-reports', concurrency: 1 });

function buildRouter(engine: ReturnType<typeof testEngine>) {
  const t = initTRPC.context<{ req: import('node:http').IncomingMessage; res: import('node:http').ServerResponse }>().create({ isDev: false });
  const idem = createIdempotency({ ledger: new Ledger({ sql: db().sql }), engine, scope: () => 'acme', logger: false });
  const resolver = answersWaiting(({ ctx }: { ctx: { run: { output: { month: string; rows: number }; replayed: boolean } } }) => ({
    ...ctx.run.output,
    replayed: ctx.run.replayed,
  }));
  return t.router({
    report: t.procedure.input(report.input).use(idem.workflow(report, { queue: reports })).mutation(resolver),
    workflows: t.router(createWorkflowRouter(t, idem, { report }, { queues: { report: reports } })),
  });
}

let engine: ReturnType<typeof testEngine>;
let url = '';
let close: () => void;
beforeAll(async () => {
  engine = testEngine(db(), [report], { queues: [reports] });
  const server = createHTTPServer({ router: buildRouter(engine), basePath: '/trpc/', createContext: ({ req, res }) => ({ req, res }) });
  url = await listen(server);
  close = () => server.close();
});
afterAll(async () => {
  for (const entry of gates.values()) entry.open();
  close();
  await engine.shutdown({ timeoutMs: 5_000 });
});

/** Holds the queue's one slot with a run of its own until the returned function is called. */
async function holdTheSlot(): Promise<() => void> {
  const name = uniqueKey('holder');
  await engine.enqueue(report, { scope: 'acme', key: name }, { month: 'hold', gate: name }, { queue: reports });
  await expect.poll(() => executions.get(name) ?? 0).toBe(1);
  return () => gate(name).open();
}

async function status(key: string) {
  const answer = await fetch(`${url}/workflows.report.status?input=${encodeURIComponent(JSON.stringify({ key }))}`);
  return ((await answer.json()) as { result: { data: { status: string; output?: unknown; queue?: { queue: string; position: number | null } } } }).result.data;
}

describe('a workflow procedure on a queue', () => {
  it('answers 202 while the queue is full, the same on a repeat, and the result once the run has had its slot', async () => {
    const release = await holdTheSlot();
    const key = uniqueKey('queued');
    const headers = { 'Idempotency-Key': `"${key}"` };
    const first = await post(url, 'report', { month: '2026-11' }, headers);
    expect(first.status).toBe(202);
    expect(first.json).toEqual({
      result: { data: { key, status: 'waiting', waitingFor: 'slot', step: 'queue:trpc-reports', queue: 'trpc-reports' } },
    });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const repeat = await post(url, 'report', { month: '2026-11' }, headers);
    expect(repeat.status).toBe(202);
    expect(repeat.body).toBe(first.body);
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    expect(executions.get(key)).toBeUndefined();
    // The status procedure shows where it waits.
    expect(await status(key)).toMatchObject({ status: 'waiting', queue: { queue: 'trpc-reports', position: 1 } });
    // Another payload under the key is a mismatch, while it waits and after.
    expect((await post(url, 'report', { month: '2026-12' }, headers)).status).toBe(422);

    release();
    await expect.poll(async () => (await engine.get({ scope: 'acme', key }))?.status).toBe('completed');
    expect(await status(key)).toMatchObject({ status: 'completed', output: { month: '2026-11', rows: 7 } });
    const done = await post(url, 'report', { month: '2026-11' }, headers);
    expect(done.status).toBe(200);
    expect(done.json).toEqual({ result: { data: { month: '2026-11', rows: 7, replayed: true } } });
    expect(done.headers.get('idempotent-replayed')).toBe('true');
    expect(executions.get(key)).toBe(1);
    expect((await post(url, 'report', { month: '2026-12' }, headers)).status).toBe(422);
  });

  it('runs the call at once when a slot is free, and answers its result', async () => {
    const key = uniqueKey('free');
    const answer = await post(url, 'report', { month: '2026-10' }, { 'Idempotency-Key': `"${key}"` });
    expect(answer.status).toBe(200);
    expect(answer.json).toEqual({ result: { data: { month: '2026-10', rows: 7, replayed: false } } });
    expect((await engine.get({ scope: 'acme', key }))?.queue).toBeUndefined();
  });

  it('enqueues one run for concurrent duplicates with the same key', async () => {
    const release = await holdTheSlot();
    const key = uniqueKey('dup');
    const headers = { 'Idempotency-Key': `"${key}"` };
    const answers = await Promise.all(Array.from({ length: 8 }, () => post(url, 'report', { month: '2026-09' }, headers)));
    const statuses = answers.map((answer) => answer.status);
    // Each is 202 (the one that enqueued it, and those that found it queued) or 409 (its enqueue not committed yet).
    expect(statuses.every((code) => code === 202 || code === 409)).toBe(true);
    expect(answers.filter((answer) => answer.status === 202 && answer.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    const accepted = answers.filter((answer) => answer.status === 202);
    expect(new Set(accepted.map((answer) => answer.body)).size).toBe(1);
    const [entries] = await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.queue_entries where scope = 'acme' and key = ${key}`;
    expect(entries!.n).toBe(1);
    release();
    await expect.poll(async () => (await engine.get({ scope: 'acme', key }))?.status).toBe('completed');
    expect(executions.get(key)).toBe(1);
  });

  it('the router\'s start puts the run on the queue and says whether it waits', async () => {
    const release = await holdTheSlot();
    const key = uniqueKey('router');
    const started = await post(url, 'workflows.report.start', { month: '2026-08' }, { 'Idempotency-Key': `"${key}"` });
    expect(started.status).toBe(200);
    expect(started.json).toMatchObject({ result: { data: { key, started: true, queued: true } } });
    expect(await status(key)).toMatchObject({ status: 'waiting', queue: { queue: 'trpc-reports', position: 1 } });
    release();
    await expect.poll(async () => (await status(key)).status).toBe('completed');
  });

  it('refuses, when the procedure is defined, a queue the engine does not register (naming it) and a queue option that is no queue', async () => {
    const t = initTRPC.create();
    const idem = createIdempotency({ ledger: new Ledger({ sql: db().sql }), engine, scope: () => 'acme' });
    const definitionError = (define: () => unknown) => {
      try {
        define();
      } catch (error) {
        expect(isStepkeyError(error, 'definition_error')).toBe(true);
        return (error as Error).message;
      }
      throw new Error('no error was thrown');
    };
    expect(definitionError(() => idem.workflow(report, { queue: 'no-such-queue' }))).toContain(
      "idempotency.workflow(trpc-queued-report): Queue 'no-such-queue' is not registered with this engine (registered: trpc-reports)",
    );
    expect(definitionError(() => createWorkflowRouter(t, idem, { report }, { queues: { report: 'no-such-queue' } }))).toContain(
      "createWorkflowRouter: report: Queue 'no-such-queue' is not registered with this engine",
    );
    expect(definitionError(() => idem.workflow(report, { queue: 42 as never }))).toContain('{ queue } must be a queue made with defineQueue() or its name');
  });
});
