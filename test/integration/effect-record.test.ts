/**
 * The effect record of call steps: every attempt durable, counted across
 * takeovers, unknown outcomes reconciled or stopped for review, and
 * resolved by an operator.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Clock } from '../../src/db/clock.js';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import type { CallContext } from '../../src/workflow/handles.js';
import { defineWorkflow, step, type StepOptions } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { runCli } from '../helpers/cli.js';

const db = useTestDatabase();
const engines: Engine[] = [];
afterAll(async () => {
  for (const engine of engines) await engine.close({ timeoutMs: 2_000 });
});

const output = z.object({ paymentId: z.string() });

/** A one-call workflow whose callee is `callee`; every call is counted by the key it carried. */
function payWorkflow(name: string, callee: (context: CallContext) => Promise<unknown>, options: Omit<StepOptions<typeof output>, 'output'> = {}) {
  return defineWorkflow({
    name,
    version: 1,
    input: z.object({}),
    steps: { pay: step('pay.v1', { output, retry: { attempts: 3, initialDelayMs: 10 }, ...options }) },
    async run({ steps }) {
      return steps.pay.call(callee as (context: CallContext) => Promise<{ paymentId: string }>);
    },
  });
}

function engineFor(workflows: Parameters<typeof testEngine>[1], options: Parameters<typeof testEngine>[2] = {}) {
  const engine = testEngine(db(), workflows, options);
  engines.push(engine);
  return engine;
}

/** An engine whose clock is ahead by more than a lease: every lease taken by an engine on the real clock has expired for it. */
const lateEngine = (workflows: Parameters<typeof testEngine>[1]) => {
  const clock = new Clock();
  clock.advance(60_000);
  return engineFor(workflows, { clock });
};

async function attemptRows(ref: { scope: string; key: string }) {
  return db().sql<{ step: string; attempt: number; outcome: string | null; ended: boolean; resolution: string | null }[]>`
    select step, attempt, outcome, ended_at is not null as ended, resolution
      from stepkey.step_attempts where scope = ${ref.scope} and run_key = ${ref.key} order by attempt`;
}

/**
 * Starts a run whose first attempt hangs in `first` (engine A), then lets a
 * late engine (B) take it over as if A had died: A's attempt never ends.
 */
async function takenOverMidCall(name: string, options: Omit<StepOptions<typeof output>, 'output'>, second: (context: CallContext) => Promise<unknown>) {
  const ref = { scope: 'acme', key: uniqueKey(name) };
  let release: () => void = () => {};
  const hung = new Promise<void>((resolve) => (release = resolve));
  const seen: CallContext[] = [];
  const first = payWorkflow(name, async (context) => {
    seen.push(context);
    if (seen.length === 1) {
      await hung;
      return { paymentId: 'from-the-stale-holder' };
    }
    return second(context);
  }, options);
  const a = engineFor([first], { leaseMs: 60_000, heartbeatMs: 60_000 });
  const b = lateEngine([first]);
  const started = await a.start(first, ref, {});
  await expect.poll(() => seen.length).toBe(1);
  await expect.poll(async () => (await attemptRows(ref)).length).toBe(1);
  expect(await b.sweep()).toBe(1);
  return { ref, seen, started, release, a, b, workflow: first };
}

describe('the effect record of a call step', () => {
  it('records every attempt with its end; attempt and previous count across the run', async () => {
    const ref = { scope: 'acme', key: uniqueKey('flaky') };
    const contexts: { attempt: number; previous: CallContext['previous'] }[] = [];
    const flaky = payWorkflow('flaky', async ({ attempt, previous }) => {
      contexts.push({ attempt, previous });
      if (attempt < 3) throw new Error(`declined ${attempt}`);
      return { paymentId: 'p-3' };
    });
    const engine = engineFor([flaky]);
    expect(await engine.run(flaky, ref, {})).toEqual({ paymentId: 'p-3' });
    expect(contexts.map((c) => c.attempt)).toEqual([1, 2, 3]);
    expect(contexts[2]!.previous.map((p) => [p.attempt, p.outcome, p.error?.message])).toEqual([
      [1, 'failed', 'declined 1'],
      [2, 'failed', 'declined 2'],
    ]);
    const info = await engine.get(ref);
    const pay = info!.steps.find((s) => s.name === 'pay.v1')!;
    expect(pay.attempts).toBe(3);
    expect(pay.history.map((h) => [h.attempt, h.outcome, h.error?.message ?? null])).toEqual([
      [1, 'failed', 'declined 1'],
      [2, 'failed', 'declined 2'],
      [3, 'ok', null],
    ]);
    for (const h of pay.history) {
      expect(h.endedAt!.getTime()).toBeGreaterThanOrEqual(h.startedAt.getTime());
      expect(h.durationMs).not.toBeNull();
    }
    expect(pay.effect).toMatchObject({ kind: 'call', started: 3, succeeded: 1, failed: 2, unknown: 0, mayHaveSeen: 3 });
  });

  it('keeps counting after a takeover: the resumed attempt is number 2 and knows number 1 is unknown', async () => {
    const second: CallContext[] = [];
    const t = await takenOverMidCall('takeover', {}, async (context) => {
      second.push(context);
      return { paymentId: 'from-the-new-holder' };
    });
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('completed');
    expect(second.map((c) => c.attempt)).toEqual([2]);
    expect(second[0]!.previous).toEqual([expect.objectContaining({ attempt: 1, outcome: 'unknown' })]);
    // The stale holder's call answers now: its end is not recorded (its lease is gone), its result not kept.
    t.release();
    await expect(t.started.result()).resolves.toEqual({ paymentId: 'from-the-new-holder' });
    expect(await attemptRows(t.ref)).toEqual([
      { step: 'pay.v1', attempt: 1, outcome: null, ended: false, resolution: null },
      { step: 'pay.v1', attempt: 2, outcome: 'ok', ended: true, resolution: null },
    ]);
    const pay = (await t.b.get(t.ref))!.steps.find((s) => s.name === 'pay.v1')!;
    expect(pay.history.map((h) => h.outcome)).toEqual(['unknown', 'ok']);
    expect(pay.effect?.mayHaveSeen).toBe(2);
  });

  it('reconciles an unknown outcome: what reconcile finds is the output, and the call is not made again', async () => {
    const lookups: { key: string; previous: number }[] = [];
    const t = await takenOverMidCall(
      'reconciled',
      {
        reconcile: async ({ key, previous }) => {
          lookups.push({ key, previous: previous.length });
          return { paymentId: 'found-by-key' };
        },
      },
      async () => {
        throw new Error('must not be called again');
      },
    );
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('completed');
    expect(t.seen).toHaveLength(1);
    expect(lookups).toEqual([{ key: t.seen[0]!.key, previous: 1 }]);
    expect((await t.b.get(t.ref))!.output).toBe('{"paymentId":"found-by-key"}');
    expect(await attemptRows(t.ref)).toEqual([{ step: 'pay.v1', attempt: 1, outcome: null, ended: false, resolution: 'reconciled' }]);
    t.release();
  });

  it('calls again when reconcile finds nothing, and retries a reconcile that throws', async () => {
    let lookups = 0;
    const t = await takenOverMidCall(
      'absent',
      {
        reconcile: async () => {
          lookups += 1;
          if (lookups === 1) throw new Error('provider lookup failed');
          return undefined;
        },
      },
      async () => ({ paymentId: 'called-again' }),
    );
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('completed');
    expect(lookups).toBe(2);
    expect(t.seen).toHaveLength(2);
    expect(await attemptRows(t.ref)).toEqual([
      { step: 'pay.v1', attempt: 1, outcome: null, ended: false, resolution: 'absent' },
      { step: 'pay.v1', attempt: 2, outcome: 'ok', ended: true, resolution: null },
    ]);
    t.release();
  });

  it('parses what reconcile finds with the step schema: a wrong shape fails the run, resumable', async () => {
    const t = await takenOverMidCall('bad-reconcile', { reconcile: async () => ({ paymentId: 42 }) as never }, async () => ({ paymentId: 'x' }));
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('failed');
    const info = (await t.b.get(t.ref))!;
    expect(info.resumable).toBe(true);
    expect(info.error?.message).toMatch(/What reconcile found for step 'pay.v1' does not match its schema/);
    expect(t.seen).toHaveLength(1);
    t.release();
  });

  it('stops an at-most-once call with an unknown outcome as needs_review; resolve completes it with the operator output', async () => {
    const t = await takenOverMidCall('review', { atMostOnce: true }, async () => {
      throw new Error('an at-most-once call must not be made twice');
    });
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('needs_review');
    const info = (await t.b.get(t.ref))!;
    expect(info.wait).toMatchObject({ kind: 'review', step: 'pay.v1', until: null });
    expect(info.steps.find((s) => s.name === 'pay.v1')).toMatchObject({ finished: false, effect: { unknown: 1, mayHaveSeen: 1 } });
    // Never expires, sweepers skip it, duplicates are told it is in progress.
    const [row] = await db().sql`select status, wait_kind, wake_at, expires_at, lease_token from stepkey.ledger where scope = ${t.ref.scope} and key = ${t.ref.key}`;
    expect(row).toMatchObject({ status: 'waiting', wait_kind: 'review', wake_at: null, expires_at: null, lease_token: null });
    expect(await t.b.sweep()).toBe(0);
    expect(await t.b.attempt(t.workflow, t.ref, {})).toEqual({ state: 'needs_review', retryAfterMs: expect.any(Number) });
    // The operator's output is checked against the step's schema before anything changes.
    await expect(t.b.resolve(t.ref, { step: 'pay.v1', output: { paymentId: 7 } })).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(t.b.resolve(t.ref, { step: 'other.v1', output: { paymentId: 'x' } })).rejects.toMatchObject({ code: 'not_in_review' });
    // A resolver that only changes state (no workflows registered, like the CLI) leaves execution to a sweeper.
    const operator = engineFor([t.workflow]);
    const resolved = await operator.resolve(t.ref, { step: 'pay.v1', output: { paymentId: 'pay_operator' } });
    expect(resolved).toEqual({ step: 'pay.v1', output: '{"paymentId":"pay_operator"}', attempts: 1 });
    await expect(operator.resolve(t.ref, { step: 'pay.v1', retry: true })).rejects.toMatchObject({ code: 'not_in_review' });
    await expect.poll(async () => (await t.b.get(t.ref))?.status).toBe('completed');
    expect((await t.b.get(t.ref))!.output).toBe('{"paymentId":"pay_operator"}');
    expect(t.seen).toHaveLength(1);
    expect(await attemptRows(t.ref)).toEqual([{ step: 'pay.v1', attempt: 1, outcome: null, ended: false, resolution: 'resolved' }]);
    t.release();
  });

  it('treats an attempt cut by its timeout as unknown: an at-most-once step stops, and resolve --retry calls again', async () => {
    const ref = { scope: 'acme', key: uniqueKey('timeout') };
    let calls = 0;
    const slow = payWorkflow(
      'slow-once',
      async ({ signal }) => {
        calls += 1;
        if (calls === 1) await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        return { paymentId: `p-${calls}` };
      },
      { atMostOnce: true, timeoutMs: 200 },
    );
    const engine = engineFor([slow]);
    expect(await engine.attempt(slow, ref, {})).toEqual({ state: 'needs_review', retryAfterMs: expect.any(Number) });
    const info = (await engine.get(ref))!;
    expect(info.status).toBe('needs_review');
    const pay = info.steps.find((s) => s.name === 'pay.v1')!;
    expect(pay.history).toEqual([
      expect.objectContaining({ attempt: 1, outcome: 'unknown', endedAt: expect.any(Date), error: expect.objectContaining({ code: 'step_timeout' }) }),
    ]);
    expect(calls).toBe(1);
    await engine.resolve(ref, { step: 'pay.v1', retry: true });
    await expect.poll(async () => (await engine.get(ref))?.status).toBe('completed');
    expect(calls).toBe(2);
    expect((await attemptRows(ref)).map((r) => [r.attempt, r.outcome, r.resolution])).toEqual([
      [1, 'unknown', 'retried'],
      [2, 'ok', null],
    ]);
  });

  it("records each resolve in the audit log — the engine's and the CLI's, with who, the step and the answer — and a refused one not at all", async () => {
    let calls = 0;
    const once = payWorkflow(
      'audited-once',
      async ({ signal }) => {
        calls += 1;
        if (calls <= 2) await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        return { paymentId: `p-${calls}` };
      },
      { atMostOnce: true, timeoutMs: 200 },
    );
    const engine = engineFor([once]);
    const viaEngine = { scope: 'acme', key: uniqueKey('audit-resolve') };
    const viaCli = { scope: 'acme', key: uniqueKey('audit-resolve-cli') };
    for (const ref of [viaEngine, viaCli]) {
      expect(await engine.attempt(once, ref, {})).toEqual({ state: 'needs_review', retryAfterMs: expect.any(Number) });
    }
    const audit = (ref: { scope: string; key: string }) =>
      db().sql<{ action: string; actor: string; source: string; applied: boolean; detail: string }[]>`
        select action, actor, source, applied, detail from stepkey.audit_log where scope = ${ref.scope} and key = ${ref.key} order by id`;
    await expect(engine.resolve(viaEngine, { step: 'pay.v1', output: { paymentId: 7 } })).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(engine.resolve(viaEngine, { step: 'other.v1', retry: true })).rejects.toMatchObject({ code: 'not_in_review' });
    expect(await audit(viaEngine)).toEqual([]);

    await engine.resolve(viaEngine, { step: 'pay.v1', output: { paymentId: 'pay_operator' } }, { actor: 'ada@ops', source: 'api' });
    const cli = await runCli(['resolve', viaCli.key, '--scope', viaCli.scope, '--step', 'pay.v1', '--retry'], { databaseUrl: db().url });
    expect(cli.code, cli.stderr).toBe(0);
    const [resolved] = await audit(viaEngine);
    expect(resolved).toMatchObject({ action: 'resolve', actor: 'ada@ops', source: 'api', applied: true });
    expect(JSON.parse(resolved!.detail)).toEqual({ step: 'pay.v1', resolution: 'resolved', output: '{"paymentId":"pay_operator"}', attempts: 1, before: 'needs_review' });
    const [retried] = await audit(viaCli);
    expect(retried).toMatchObject({ action: 'resolve', actor: expect.stringMatching(/^cli:/), source: 'cli', applied: true });
    expect(JSON.parse(retried!.detail)).toEqual({ step: 'pay.v1', resolution: 'retried', attempts: 1, before: 'needs_review' });
    // Resolved already: refused, nothing more recorded.
    await expect(engine.resolve(viaEngine, { step: 'pay.v1', retry: true })).rejects.toMatchObject({ code: 'not_in_review' });
    expect(await audit(viaEngine)).toHaveLength(1);
    // Shown where operators see actions: inspect (and the dashboard's run page, which reads the same).
    const inspected = await runCli(['inspect', viaCli.key, '--scope', viaCli.scope, '--json'], { databaseUrl: db().url });
    expect(inspected.json().matches[0].audit).toEqual([expect.objectContaining({ action: 'resolve', source: 'cli', applied: true })]);
    await expect.poll(async () => (await engine.sweep(), (await engine.get(viaCli))?.status), { timeout: PATIENCE_MS }).toBe('completed');
  });

  it('stores an error with its cause chain, and names stored errors and failed runs apart', async () => {
    const refErrored = { scope: 'acme', key: uniqueKey('errored') };
    const refFailed = { scope: 'acme', key: uniqueKey('failed') };
    const refused = payWorkflow('refused', async () => {
      throw new NonRetryableError('card refused', { code: 'CARD_REFUSED', cause: new Error('issuer said no') });
    });
    const flaky = payWorkflow('always-down', async () => {
      throw new Error('503 from the provider');
    });
    const engine = engineFor([refused, flaky]);
    expect(await engine.attempt(refused, refErrored, {})).toMatchObject({ state: 'errored' });
    await expect(engine.attempt(flaky, refFailed, {})).rejects.toMatchObject({ code: 'run_failed' });
    const errored = (await engine.get(refErrored))!;
    expect(errored).toMatchObject({ status: 'errored', resumable: false });
    expect(errored.error).toMatchObject({ message: 'card refused', code: 'CARD_REFUSED', cause: { message: 'issuer said no' } });
    const failed = (await engine.get(refFailed))!;
    expect(failed).toMatchObject({ status: 'failed', resumable: true });
    expect(failed.steps.find((s) => s.name === 'pay.v1')!.history.map((h) => h.outcome)).toEqual(['failed', 'failed', 'failed']);
    // The failed run can be cancelled; the errored one has ended.
    expect(await engine.cancel(refFailed)).toBe(true);
    expect(await engine.cancel(refErrored)).toBe(false);
  });
});

describe('what the effect record costs', () => {
  it("rides an attempt's start on the commit before the call, and commits it alone only when there is none", async () => {
    const ref = { scope: 'acme', key: uniqueKey('cost') };
    // Rows written by one transaction share its id (xmin); read while each call runs (its start committed, its end not).
    const xmin = async (table: 'ledger' | 'step_attempts', name: string) => {
      const rows =
        table === 'ledger'
          ? await db().sql<{ tx: string }[]>`select xmin::text as tx from stepkey.steps where scope = ${ref.scope} and run_key = ${ref.key} and name = ${name}`
          : await db().sql<{ tx: string }[]>`select xmin::text as tx from stepkey.step_attempts where scope = ${ref.scope} and run_key = ${ref.key} and step = ${name}`;
      return rows[0]?.tx;
    };
    const seen: Record<string, string | undefined> = {};
    const flow = defineWorkflow({
      name: 'cost',
      version: 1,
      input: z.object({}),
      steps: { reserve: step('reserve.v1'), first: step('first.v1'), second: step('second.v1') },
      async run({ steps }) {
        await steps.reserve.tx(async () => 'reserved');
        await steps.first.call(async () => {
          seen.reserve = await xmin('ledger', 'reserve.v1');
          seen.firstStart = await xmin('step_attempts', 'first.v1');
          return 'one';
        });
        return steps.second.call(async () => {
          seen.first = await xmin('ledger', 'first.v1');
          seen.secondStart = await xmin('step_attempts', 'second.v1');
          return 'two';
        });
      },
    });
    const engine = engineFor([flow]);
    await engine.run(flow, ref, {});
    // The first call's start committed with the tx step before it.
    expect(seen.firstStart).toBeDefined();
    expect(seen.firstStart).toBe(seen.reserve);
    // The second call's start had nothing to ride: a commit of its own, apart from the first call's record.
    expect(seen.secondStart).toBeDefined();
    expect(seen.secondStart).not.toBe(seen.first);
  });
});

describe('database errors that retrying cannot fix', () => {
  it('does not retry a step whose table is gone; the run stops resumable with the SQLSTATE, and resumes once it is back', async () => {
    await db().sql`create table ledger_notes (run_key text not null)`;
    let tries = 0;
    const notes = defineWorkflow({
      name: 'notes',
      version: 1,
      input: z.object({}),
      steps: { note: step('note.v1', { retry: { attempts: 5, initialDelayMs: 10 } }) },
      async run({ steps, ctx }) {
        await steps.note.tx(async (_db, { sql }) => {
          tries += 1;
          await sql`insert into ledger_notes (run_key) values (${ctx.rootKey})`;
        });
        return 'noted';
      },
    });
    const engine = engineFor([notes]);
    expect(await engine.run(notes, { scope: 'acme', key: uniqueKey('before') }, {})).toBe('noted');
    // Renamed under the live engine.
    await db().sql`alter table ledger_notes rename to ledger_notes_moved`;
    tries = 0;
    const ref = { scope: 'acme', key: uniqueKey('broken') };
    await expect(engine.attempt(notes, ref, {})).rejects.toMatchObject({ code: 'run_failed' });
    expect(tries).toBe(1);
    const info = (await engine.get(ref))!;
    expect(info).toMatchObject({ status: 'failed', resumable: true });
    const chain: unknown[] = [];
    for (let e: { cause?: unknown; db?: unknown } | undefined = info.error; e; e = e.cause as typeof e) chain.push(e.db);
    expect(chain).toContainEqual(expect.objectContaining({ sqlState: '42P01' }));
    const inspected = await runCli(['inspect', ref.key, '--scope', ref.scope], { databaseUrl: db().url });
    expect(inspected.stdout).toMatch(/last error .*\[SQLSTATE 42P01\]/);
    await db().sql`alter table ledger_notes_moved rename to ledger_notes`;
    expect(await engine.resume(ref)).toMatchObject({ state: 'completed', output: 'noted' });
    expect(tries).toBe(2);
    expect((await engine.get(ref))!.status).toBe('completed');
    await sleep(0);
  });
});
