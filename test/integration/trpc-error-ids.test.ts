/**
 * A 500 names an error id, never the error: a failed run's step error (SQL,
 * its parameters, the caller's email) and a resolver's unexpected error are
 * logged in full with the id, and the caller gets a fixed message with it;
 * `stepkey inspect` shows a failed run's id. Deliberate errors keep their
 * status and message.
 */
import type { AddressInfo } from 'node:net';
import { TRPCError, initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger } from '../../src/ledger/ledger.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import type { Logger } from '../../src/log/logger.js';
import { createIdempotency } from '../../src/trpc/idempotency.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { AppContext } from '../helpers/trpc-app.js';
import { runCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

const EMAIL = 'ada.lovelace@example.com';
const SQL_TEXT = `insert into customers (email, card) values ('${EMAIL}', '4242')`;

const signup = defineWorkflow({
  name: 'error-id-signup',
  version: 1,
  input: z.object({ email: z.string(), how: z.enum(['fail', 'declined']) }),
  steps: { save: step('save-customer.v1', { retry: { attempts: 2, initialDelayMs: 10 } }) },
  async run({ input, steps }) {
    await steps.save.call(async () => {
      if (input.how === 'declined') throw new NonRetryableError(`the card of ${input.email} was declined`, { code: 'PRECONDITION_FAILED' });
      throw Object.assign(new Error(`duplicate key value violates unique constraint: ${SQL_TEXT}`), { parameters: [input.email] });
    });
    return { ok: true };
  },
});

const lines: { level: string; object: Record<string, unknown>; message?: string }[] = [];
const logger: Logger = {
  debug: (object, message) => void lines.push({ level: 'debug', object, message }),
  info: (object, message) => void lines.push({ level: 'info', object, message }),
  warn: (object, message) => void lines.push({ level: 'warn', object, message }),
  error: (object, message) => void lines.push({ level: 'error', object, message }),
};

let url = '';
let close: () => Promise<void>;
beforeAll(async () => {
  const engine = testEngine(db(), [signup]);
  const t = initTRPC.context<AppContext>().create({ isDev: true });
  const idem = createIdempotency<AppContext>({ ledger: new Ledger({ sql: db().sql }), engine, scope: (ctx) => ctx.tenant, logger });
  const router = t.router({
    signup: t.procedure.input(signup.input).use(idem.workflow(signup)).mutation(({ ctx }) => ctx.run.output),
    note: t.procedure
      .input(z.object({ email: z.string(), how: z.enum(['crash', 'deliberate']) }))
      .use(idem.procedure())
      .mutation(({ input }) => {
        if (input.how === 'deliberate') throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: 'the notes service is being upgraded' });
        throw new Error(`could not run ${SQL_TEXT}`);
      }),
  });
  const server = createHTTPServer({
    router,
    basePath: '/trpc/',
    createContext: ({ req, res, info }): AppContext => ({ req, res, info, tenant: 'acme' }),
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/trpc`;
  close = async () => {
    await new Promise((resolve) => server.close(resolve));
    await engine.shutdown();
  };
});
afterAll(() => close());

const keyed = (key: string) => ({ 'idempotency-key': `"${key}"` });
const errorIdIn = (body: string) => /error id (err-[0-9a-f]{16})/.exec(body)?.[1];

describe('a failed run', () => {
  it('answers 500 with a fixed message and an error id, logs the full error with it, and inspect shows it', async () => {
    const key = uniqueKey('signup');
    const answer = await post(url, 'signup', { email: EMAIL, how: 'fail' }, keyed(key));
    expect(answer.status).toBe(500);
    expect(answer.body).not.toContain(EMAIL);
    expect(answer.body).not.toMatch(/insert into|customers|duplicate key|4242/);
    expect(answer.body).toMatch(/stepkey: the run failed \(error id err-[0-9a-f]{16}\)/);
    const errorId = errorIdIn(answer.body)!;

    const line = lines.find((entry) => entry.object.errorId === errorId);
    expect(line).toMatchObject({ level: 'error', object: { event: 'trpc.internal_error', scope: 'acme', key, path: 'signup' } });
    expect(JSON.stringify(line!.object.error)).toContain(SQL_TEXT);

    // The retry resumes the failed run, fails the same way, and names the same id.
    const again = await post(url, 'signup', { email: EMAIL, how: 'fail' }, keyed(key));
    expect(again.status).toBe(500);
    expect(errorIdIn(again.body)).toBe(errorId);

    const inspected = await runCli(['inspect', key, '--scope', 'acme'], { databaseUrl: db().url });
    expect(inspected.code, inspected.stderr).toBe(0);
    expect(inspected.stdout).toContain(`error id   ${errorId}`);
    const json = await runCli(['inspect', key, '--scope', 'acme', '--json'], { databaseUrl: db().url });
    expect(json.json<{ matches: { errorId: string | null }[] }>().matches[0]!.errorId).toBe(errorId);
  });

  it('keeps a declared deterministic error as it is: its status and message', async () => {
    const answer = await post(url, 'signup', { email: EMAIL, how: 'declined' }, keyed(uniqueKey('declined')));
    expect(answer.status).toBe(412);
    expect(answer.body).toContain(`the card of ${EMAIL} was declined`);
  });
});

describe('an idempotent procedure', () => {
  it('answers an unexpected error with an error id, never its text', async () => {
    const answer = await post(url, 'note', { email: EMAIL, how: 'crash' }, keyed(uniqueKey('note')));
    expect(answer.status).toBe(500);
    expect(answer.body).not.toContain(EMAIL);
    expect(answer.body).not.toMatch(/insert into|could not run/);
    const errorId = errorIdIn(answer.body);
    expect(answer.body).toMatch(/stepkey: the request failed \(error id err-[0-9a-f]{16}\)/);
    const line = lines.find((entry) => entry.object.errorId === errorId);
    expect(line?.object).toMatchObject({ event: 'trpc.internal_error', path: 'note', scope: 'acme' });
    expect(JSON.stringify(line!.object.error)).toContain(SQL_TEXT);
  });

  it('keeps a 500 the app raised on purpose', async () => {
    const answer = await post(url, 'note', { email: EMAIL, how: 'deliberate' }, keyed(uniqueKey('deliberate')));
    expect(answer.status).toBe(500);
    expect(answer.body).toContain('the notes service is being upgraded');
    expect(answer.body).not.toMatch(/error id/);
  });
});
