/**
 * A run that needs review, through tRPC: the workflow procedure answers 409 +
 * Retry-After (in progress) while it waits for an operator, the router's
 * status says needs_review; once resolved and continued by a sweeper, the
 * result is rendered and replayed. errored and failed runs read apart.
 */
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { createWorkflowRouter } from '../../src/trpc/workflow-router.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { listen } from '../helpers/trpc-app.js';

const db = useTestDatabase();

let calls = 0;
const wire = defineWorkflow({
  name: 'trpc-wire',
  version: 1,
  input: z.object({ mode: z.enum(['hang', 'refuse', 'down']) }),
  output: z.object({ wireId: z.string() }),
  steps: { wire: step('wire.v1', { output: z.object({ wireId: z.string() }), atMostOnce: true, timeoutMs: 100, retry: { attempts: 2, initialDelayMs: 10 } }) },
  async run({ input, steps }) {
    return steps.wire.call(async ({ signal }) => {
      calls += 1;
      if (input.mode === 'refuse') throw new NonRetryableError('wire refused by the bank');
      if (input.mode === 'down') throw new Error('bank unreachable');
      await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
      return { wireId: 'never' };
    });
  },
});

let engine: ReturnType<typeof testEngine>;
let url = '';
let close: () => void;
beforeAll(async () => {
  engine = testEngine(db(), [wire]);
  const t = initTRPC.context<{ req: import('node:http').IncomingMessage; res: import('node:http').ServerResponse }>().create({ isDev: false });
  const idem = createIdempotency({ ledger: new Ledger({ sql: db().sql }), engine, scope: () => 'acme' });
  const router = t.router({
    send: t.procedure.input(wire.input).use(idem.workflow(wire)).mutation(({ ctx }) => ctx.run.output),
    workflows: t.router(createWorkflowRouter(t, idem, { wire })),
  });
  const server = createHTTPServer({ router, basePath: '/trpc/', createContext: ({ req, res }) => ({ req, res }) });
  url = `${await listen(server)}`;
  close = () => server.close();
});
afterAll(async () => {
  close();
  await engine.shutdown();
});

const status = async (key: string) => {
  const response = await fetch(`${url}/workflows.wire.status?input=${encodeURIComponent(JSON.stringify({ key }))}`);
  return ((await response.json()) as { result: { data: { status: string; resumable: boolean } } }).result.data;
};

describe('runs that need review, through tRPC', () => {
  it('answers in progress while an operator is needed, and the operator output once resolved', async () => {
    const key = uniqueKey('wire');
    const headers = { 'Idempotency-Key': `"${key}"` };
    const first = await post(url, 'send', { mode: 'hang' }, headers);
    expect(first.status).toBe(409);
    expect(first.headers.get('retry-after')).not.toBeNull();
    expect((await post(url, 'send', { mode: 'hang' }, headers)).status).toBe(409);
    expect(await status(key)).toMatchObject({ status: 'needs_review', resumable: false });
    expect(calls).toBe(1);
    await engine.resolve({ scope: 'acme', key }, { step: 'wire.v1', output: { wireId: 'w-checked-by-phone' } });
    await expect.poll(async () => (await status(key)).status).toBe('completed');
    const done = await post(url, 'send', { mode: 'hang' }, headers);
    expect(done.status).toBe(200);
    expect(done.headers.get('idempotent-replayed')).toBe('true');
    expect(done.json).toMatchObject({ result: { data: { wireId: 'w-checked-by-phone' } } });
    expect(calls).toBe(1);
  });

  it('reads an errored run (stored, final) apart from a failed one (resumable)', async () => {
    const refused = uniqueKey('refused');
    const down = uniqueKey('down');
    await post(url, 'send', { mode: 'refuse' }, { 'Idempotency-Key': `"${refused}"` });
    await post(url, 'send', { mode: 'down' }, { 'Idempotency-Key': `"${down}"` });
    expect(await status(refused)).toMatchObject({ status: 'errored', resumable: false });
    expect(await status(down)).toMatchObject({ status: 'failed', resumable: true });
  });
});
