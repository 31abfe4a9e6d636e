/**
 * A workflow procedure whose run waits answers 202 Accepted with the run's
 * key and what it waits for, without running the resolver; a repeat while it
 * waits answers the same, marked as a replay; once the run completes, the
 * result is rendered and replayed as for any run.
 */
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import type { inferRouterOutputs } from '@trpc/server';
import { z } from 'zod';
import { Ledger } from '../../src/ledger/ledger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { answersWaiting, type WaitingAnswer } from '../../src/trpc/workflow-procedure.js';
import { createWorkflowRouter } from '../../src/trpc/workflow-router.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';
import { listen } from '../helpers/trpc-app.js';

const db = useTestDatabase();

let resolverCalls = 0;
const approval = defineWorkflow({
  name: 'trpc-approval',
  version: 1,
  input: z.object({ doc: z.string() }),
  events: { approved: z.object({ by: z.string() }) },
  steps: { approval: step('approval.v1') },
  async run({ input, steps }) {
    const got = await steps.approval.waitForEvent('approved');
    return { doc: input.doc, approvedBy: got.payload.by };
  },
});

function buildRouter(engine: ReturnType<typeof testEngine>) {
  const t = initTRPC.context<{ req: import('node:http').IncomingMessage; res: import('node:http').ServerResponse }>().create({ isDev: false });
  const idem = createIdempotency({ ledger: new Ledger({ sql: db().sql }), engine, scope: () => 'acme' });
  return t.router({
    approve: t.procedure
      .input(approval.input)
      .use(idem.workflow(approval))
      .mutation(
        answersWaiting(({ ctx }) => {
          resolverCalls += 1;
          return { ...ctx.run.output, replayed: ctx.run.replayed };
        }),
      ),
    workflows: t.router(createWorkflowRouter(t, idem, { approval })),
  });
}

let engine: ReturnType<typeof testEngine>;
let url = '';
let close: () => void;
beforeAll(async () => {
  engine = testEngine(db(), [approval]);
  const server = createHTTPServer({ router: buildRouter(engine), basePath: '/trpc/', createContext: ({ req, res }) => ({ req, res }) });
  url = await listen(server);
  close = () => server.close();
});
afterAll(async () => {
  close();
  await engine.shutdown();
});

describe('a workflow procedure whose run waits', () => {
  it('answers 202 with what it waits for, the same on a repeat (a replay), and the result once it completes', async () => {
    type Output = inferRouterOutputs<ReturnType<typeof buildRouter>>['approve'];
    expectTypeOf<Output>().toEqualTypeOf<{ doc: string; approvedBy: string; replayed: boolean } | WaitingAnswer>();
    const key = uniqueKey('approve');
    const headers = { 'Idempotency-Key': `"${key}"` };
    const first = await post(url, 'approve', { doc: 'contract' }, headers);
    expect(first.status).toBe(202);
    expect(first.json).toEqual({
      result: { data: { key, status: 'waiting', waitingFor: 'event', step: 'approval.v1', topic: 'approved' } },
    });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const repeat = await post(url, 'approve', { doc: 'contract' }, headers);
    expect(repeat.status).toBe(202);
    expect(repeat.body).toBe(first.body);
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    expect(resolverCalls).toBe(0);

    const status = await fetch(`${url}/workflows.approval.status?input=${encodeURIComponent(JSON.stringify({ key }))}`);
    expect(((await status.json()) as { result: { data: { status: string } } }).result.data.status).toBe('waiting');

    await engine.send({ scope: 'acme', key }, 'approved', { by: 'ada' }, { key: 'approval-1' });
    await expect.poll(async () => (await engine.get({ scope: 'acme', key }))?.status).toBe('completed');
    const done = await post(url, 'approve', { doc: 'contract' }, headers);
    expect(done.status).toBe(200);
    expect(done.json).toEqual({ result: { data: { doc: 'contract', approvedBy: 'ada', replayed: true } } });
    expect(done.headers.get('idempotent-replayed')).toBe('true');
    // A different payload under the key is still a mismatch.
    expect((await post(url, 'approve', { doc: 'other' }, headers)).status).toBe(422);
  });
});
