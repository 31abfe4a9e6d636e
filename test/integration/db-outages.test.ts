/**
 * Runs under database outages: a connection that fails when a step begins is
 * a failed attempt that the step's policy retries; an outage longer than the
 * policy leaves the run in progress for a sweeper (never failed, never a
 * driver's message); a commit whose connection went restarts from the
 * ledger; and an execution stuck waiting for a connection that never comes
 * stops being renewed, so another process takes the run over.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect, type Database } from '../../src/db/connect.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { proxy, type TcpProxy } from '../helpers/tcp-proxy.js';

const db = useTestDatabase({ max: 20 });

let relay: TcpProxy;
let viaRelay: Database;

beforeAll(async () => {
  await db().sql`create table if not exists outage_writes (run_key text, step text)`;
  relay = proxy(new URL(db().url));
  await relay.up();
  viaRelay = connect(relay.url, { max: 4 });
});
afterAll(async () => {
  await viaRelay.close();
  await relay.down().catch(() => {});
});

const writes = async (runKey: string) =>
  (await db().sql<{ step: string }[]>`select step from outage_writes where run_key = ${runKey} order by step`).map((row) => row.step);

/** A gate the workflow waits at between two steps, and the test opens. */
function gate() {
  let open!: () => void;
  let reached!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const arrived = new Promise<void>((resolve) => (reached = resolve));
  return { open, arrived, wait: () => (reached(), opened) };
}

function twoSteps(name: string, first: 'call' | 'tx', between: () => Promise<void>, attempts: number) {
  return defineWorkflow({
    name,
    version: 1,
    input: z.object({}),
    steps: {
      start: step('start.v1'),
      a: step('a.v1'),
      b: step('b.v1', { retry: { attempts, initialDelayMs: 150, factor: 1 } }),
    },
    async run({ steps, ctx }) {
      // A call first: the run's start commits before it.
      await steps.start.call(async () => 'started');
      if (first === 'call') await steps.a.call(async () => 'called');
      else await steps.a.tx(async (_db, { sql }) => void (await sql`insert into outage_writes values (${ctx.rootKey}, 'a')`));
      await between();
      await steps.b.tx(async (_db, { sql }) => void (await sql`insert into outage_writes values (${ctx.rootKey}, 'b')`));
      return 'done';
    },
  });
}

describe('a connection that fails when a step begins', () => {
  it('is a failed attempt that the step’s retry policy retries', async () => {
    const between = gate();
    // Retries for minutes: the outage ends long before they run out, however slowly this host runs.
    const flow = twoSteps('outage-begin', 'call', between.wait, 1_000);
    const engine = testEngine(viaRelay as never, [flow]);
    const ref = { scope: 'acme', key: uniqueKey('begin') };
    const running = engine.attempt(flow, ref, {});
    await between.arrived;
    await relay.down();
    between.open();
    await sleep(400);
    await relay.up();
    expect(await running).toMatchObject({ state: 'completed', output: 'done' });
    const info = (await engine.get(ref))!;
    expect(info.status).toBe('completed');
    expect(info.steps.find((s) => s.name === 'b.v1')!.attempts).toBeGreaterThan(1);
    expect(await writes(info.rootKey)).toEqual(['b']);
    await engine.shutdown();
  });

  it('outlasting the policy leaves the run in progress, not failed, for a sweeper to finish', async () => {
    const between = gate();
    const flow = twoSteps('outage-long', 'call', between.wait, 2);
    const engine = testEngine(viaRelay as never, [flow]);
    const ref = { scope: 'acme', key: uniqueKey('long') };
    const running = engine.attempt(flow, ref, {}).catch((error: unknown) => error);
    await between.arrived;
    await relay.down();
    between.open();
    const error = (await running) as StepkeyError;
    expect(error).toBeInstanceOf(StepkeyError);
    expect(error.code).toBe('database_unavailable');
    expect(error.message).not.toMatch(/ECONNREFUSED|127\.0\.0\.1/);
    await relay.up();

    const [row] = await db().sql`select status, last_error from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    expect(row).toMatchObject({ status: 'in_progress', last_error: null });
    const rescuer = testEngine(db(), [flow]);
    rescuer.clock.advance(engine.leaseMs + 60_000);
    await expect.poll(() => rescuer.sweep()).toBeGreaterThan(0);
    await expect.poll(async () => (await rescuer.get(ref))?.status).toBe('completed');
    expect(await writes((await rescuer.get(ref))!.rootKey)).toEqual(['b']);
    await rescuer.shutdown();
    await engine.shutdown();
  });
});

describe('a commit whose connection went', () => {
  it('restarts from the ledger once the database is back: the lost step runs again, once', async () => {
    const between = gate();
    const flow = twoSteps('outage-commit', 'tx', between.wait, 3);
    const engine = testEngine(viaRelay as never, [flow]);
    const ref = { scope: 'acme', key: uniqueKey('commit') };
    const running = engine.attempt(flow, ref, {});
    await between.arrived;
    // Step a's transaction waits for the next boundary to commit: cut it.
    await relay.down();
    setTimeout(() => void relay.up(), 400);
    between.open();
    expect(await running).toMatchObject({ state: 'completed', output: 'done' });
    const info = (await engine.get(ref))!;
    expect(await writes(info.rootKey)).toEqual(['a', 'b']);
    await engine.shutdown();
  });

  it('that carried the run’s start answers "unavailable" and leaves nothing; the retry starts the run', async () => {
    const between = gate();
    const flow = defineWorkflow({
      name: 'outage-start',
      version: 1,
      input: z.object({}),
      steps: { a: step('a.v1'), b: step('b.v1') },
      async run({ steps, ctx }) {
        // A tx step first: the run's start commits with it, at the next boundary.
        await steps.a.tx(async (_db, { sql }) => void (await sql`insert into outage_writes values (${ctx.rootKey}, 'a')`));
        await between.wait();
        await steps.b.tx(async (_db, { sql }) => void (await sql`insert into outage_writes values (${ctx.rootKey}, 'b')`));
        return 'done';
      },
    });
    const engine = testEngine(viaRelay as never, [flow]);
    const ref = { scope: 'acme', key: uniqueKey('start') };
    const running = engine.attempt(flow, ref, {}).catch((error: unknown) => error);
    await between.arrived;
    await relay.down();
    setTimeout(() => void relay.up(), 300);
    between.open();
    expect(await running).toMatchObject({ code: 'database_unavailable' });
    expect(await db().sql`select 1 from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`).toHaveLength(0);
    await expect.poll(() => engine.attempt(flow, ref, {}).catch(() => undefined)).toMatchObject({ state: 'completed' });
    expect(await writes((await engine.get(ref))!.rootKey)).toEqual(['a', 'b']);
    await engine.shutdown();
  });
});

describe('a connection that never comes', () => {
  it('bounds the wait, stops renewing the lease, and another process takes the run over', async () => {
    let hang = false;
    const pool = db().sql;
    // A pool whose reserve() never settles once `hang` is set, as postgres.js can lose one.
    const stuck = new Proxy(pool, {
      get(target, property, receiver) {
        if (property === 'reserve' && hang) return () => new Promise(() => {});
        return Reflect.get(target, property, receiver);
      },
    });
    const between = gate();
    const flow = defineWorkflow({
      name: 'never-comes',
      version: 1,
      input: z.object({}),
      steps: { a: step('a.v1'), b: step('b.v1', { timeoutMs: 60_000, retry: { attempts: 50, initialDelayMs: 50, factor: 1 } }) },
      async run({ steps, ctx }) {
        await steps.a.call(async () => 'called');
        await between.wait();
        await steps.b.tx(async (_db, { sql }) => void (await sql`insert into outage_writes values (${ctx.rootKey}, 'b')`));
        return 'done';
      },
    });
    const holder = testEngine({ ...db(), sql: stuck } as never, [flow], { leaseMs: 600, heartbeatMs: 100 });
    const ref = { scope: 'acme', key: uniqueKey('never') };
    const running = holder.attempt(flow, ref, {}).catch((error: unknown) => error);
    await between.arrived;
    hang = true;
    between.open();
    // It settles — the holder let the run go — instead of waiting forever.
    const error = (await running) as StepkeyError;
    expect(error).toBeInstanceOf(StepkeyError);
    expect(['lease_lost', 'database_unavailable']).toContain(error.code);
    // Its lease is no longer renewed: it runs out.
    await expect
      .poll(async () => (await db().sql`select locked_until <= now() as expired from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]!.expired)
      .toBe(true);
    const rescuer = testEngine(db(), [flow]);
    await expect.poll(() => rescuer.sweep()).toBeGreaterThan(0);
    await expect.poll(async () => (await rescuer.get(ref))?.status).toBe('completed');
    expect(await writes((await rescuer.get(ref))!.rootKey)).toEqual(['b']);
    await rescuer.shutdown();
    await holder.shutdown({ timeoutMs: 100 });
  });
});

describe('a call in flight when the database goes', () => {
  it('is aborted before its lease can run out, so no earlier holder still calls once another may take the run over', async () => {
    let entered!: () => void;
    const inCall = new Promise<void>((resolve) => (entered = resolve));
    let aborted: { at: number; reason: unknown } | undefined;
    const flow = defineWorkflow({
      name: 'outage-in-call',
      version: 1,
      input: z.object({}),
      steps: { pay: step('pay.v1', { timeoutMs: 60_000 }) },
      async run({ steps }) {
        return steps.pay.call(
          ({ signal }) =>
            new Promise((_, reject) => {
              entered();
              signal.addEventListener('abort', () => {
                aborted = { at: Date.now(), reason: signal.reason };
                reject(signal.reason);
              });
            }),
        );
      },
    });
    // The execution stops once its lease would end before the next beat plus a tenth of the lease: with
    // this lease, ten seconds before it ends — a margin a busy host's timers do not miss.
    const engine = testEngine(viaRelay as never, [flow], { leaseMs: 30_000 });
    const ref = { scope: 'acme', key: uniqueKey('in-call') };
    await engine.start(flow, ref, {});
    await inCall;
    await relay.down();
    await expect.poll(() => aborted).toBeDefined();
    await relay.up();
    expect((aborted!.reason as Error).message).toMatch(/lease_lost/);
    // It stopped calling while its lease still held: no takeover could have come first.
    const [row] = await db().sql<{ until: number }[]>`
      select (extract(epoch from locked_until) * 1000)::float8 as until from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    expect(aborted!.at).toBeLessThan(row!.until);
    await engine.shutdown({ timeoutMs: 100 });
  });
});
