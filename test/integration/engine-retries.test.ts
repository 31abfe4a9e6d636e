/**
 * A run's steps retried, timed out and cancelled: a hanging call is aborted
 * at its timeout and retried; a tx step blocked on a lock is rolled back at
 * its timeout (PostgreSQL cancels the statement) and retried, or given up
 * with its writes rolled back when its attempts run out, failing the run
 * resumably; the next start resumes from that step; a cancel lands at the
 * next step boundary, the step in flight does not commit, and ctx.signal is
 * aborted.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { childKey } from '../../src/keys/derive.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { effectsTable } from '../helpers/effects-table.js';
import { testEngine } from '../helpers/engine.js';
import { storedRoot, uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { create, effectCount, record } = effectsTable(db);

beforeAll(async () => {
  await create();
});

describe('retries, timeouts and cancel', () => {
  it('aborts a hanging call at its timeout and retries it', async () => {
    let attempts = 0;
    const hang = defineWorkflow({
      name: 'hang',
      version: 1,
      input: z.object({}),
      steps: { slow: step('slow.v1', { timeoutMs: 200, retry: { attempts: 3, initialDelayMs: 10 } }) },
      async run({ steps }) {
        return steps.slow.call(async ({ signal, attempt }) => {
          attempts += 1;
          if (attempt === 1) {
            await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
          }
          return { attempt };
        });
      },
    });
    const engine = testEngine(db(), [hang]);
    const ref = { scope: 'acme', key: uniqueKey('hang') };
    const started = performance.now();
    expect(await engine.run(hang, ref, {})).toEqual({ attempt: 2 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    expect(attempts).toBe(2);
    expect((await engine.get(ref))!.steps[0]).toMatchObject({ name: 'slow.v1', attempts: 2 });
    await engine.shutdown();
  });

  it('rolls back a tx step blocked on a lock at its timeout (Postgres cancels the statement) and retries it', async () => {
    // The first attempt waits for the lock until its timeout; a retry after the lock is free succeeds
    // (which one: an attempt on a busy host may outlast the timeout too, and is retried the same way).
    await db().sql`create table stock (sku text primary key, left_count int not null)`;
    await db().sql`insert into stock values ('sku-1', 5)`;
    const holder = await db().sql.reserve();
    await holder`begin`;
    await holder`select * from stock where sku = 'sku-1' for update`;
    const blocked = defineWorkflow({
      name: 'blocked-tx',
      version: 1,
      input: z.object({}),
      steps: { reserve: step('reserve.v1', { timeoutMs: 2_000, retry: { attempts: 10, initialDelayMs: 10 } }) },
      async run({ steps }) {
        return steps.reserve.tx(async (_db, context) => {
          await record('reserve.v1')(_db, context);
          if (context.attempt === 2) await holder`commit`;
          await context.sql`update stock set left_count = left_count - 1 where sku = 'sku-1'`;
          return { attempt: context.attempt };
        });
      },
    });
    const engine = testEngine(db(), [blocked]);
    const ref = { scope: 'acme', key: uniqueKey('blocked') };
    let succeeded: { attempt: number };
    try {
      succeeded = await engine.run(blocked, ref, {});
    } finally {
      holder.release();
    }
    expect(succeeded.attempt).toBeGreaterThanOrEqual(2);
    // Only the attempt that succeeded left its writes: the stock went down once, one effect row.
    expect((await db().sql`select left_count from stock where sku = 'sku-1'`)[0]!.left_count).toBe(4);
    expect(await effectCount(childKey(await storedRoot(db(), ref), 'reserve.v1'))).toBe(1);
    expect((await engine.get(ref))!.steps[0]).toMatchObject({ name: 'reserve.v1', attempts: succeeded.attempt });
    await engine.shutdown();
  });

  it('gives up on a tx step that waits past its timeout, rolls its writes back, and fails resumably when attempts run out', async () => {
    let hang = true;
    // The same workflow in two releases: the step's timeout raised in the second (the resume must not
    // time out for being slow on a busy host; the first release's attempts hang for good).
    const stalledWith = (timeoutMs: number) =>
      defineWorkflow({
        name: 'stalled-tx',
        version: 1,
        input: z.object({}),
        steps: {
          before: step('before.v1'),
          stall: step('stall.v1', { timeoutMs, retry: { attempts: 2, initialDelayMs: 10 } }),
        },
        async run({ steps }) {
          await steps.before.tx(record('before.v1'));
          return steps.stall.tx(async (_db, context) => {
            await record('stall.v1')(_db, context);
            if (hang) await new Promise(() => {});
            return 'done';
          });
        },
      });
    const stalled = stalledWith(200);
    const engine = testEngine(db(), [stalled]);
    const ref = { scope: 'acme', key: uniqueKey('stalled') };
    const error = (await engine.run(stalled, ref, {}).catch((e: unknown) => e)) as StepkeyError;
    const stallKey = childKey(await storedRoot(db(), ref), 'stall.v1');
    expect(error.code).toBe('run_failed');
    expect(error.message).toMatch(/Step 'stall.v1' failed 2 times: Step 'stall.v1' timed out after 200 ms \(attempt 2\)/);
    expect(await effectCount(stallKey)).toBe(0);
    await engine.shutdown();
    hang = false;
    const patient = stalledWith(PATIENCE_MS);
    const next = testEngine(db(), [patient]);
    expect(await next.run(patient, ref, {})).toBe('done');
    expect(await effectCount(stallKey)).toBe(1);
    expect(await effectCount(childKey(await storedRoot(db(), ref), 'before.v1'))).toBe(1);
    await next.shutdown();
  });

  it('fails a run resumably when retries run out; the next start resumes from that step', async () => {
    let healthy = false;
    const flaky = defineWorkflow({
      name: 'flaky',
      version: 1,
      input: z.object({}),
      steps: { before: step('before.v1'), flaky: step('flaky.v1', { retry: { attempts: 2, initialDelayMs: 1 } }) },
      async run({ steps }) {
        await steps.before.tx(record('before.v1'));
        await steps.flaky.tx(async (db, context) => {
          if (!healthy) throw new Error('still down');
          await record('flaky.v1')(db, context);
        });
        return 'done';
      },
    });
    const engine = testEngine(db(), [flaky]);
    const ref = { scope: 'acme', key: uniqueKey('flaky') };
    const error = (await engine.run(flaky, ref, {}).catch((e: unknown) => e)) as StepkeyError;
    expect(error.code).toBe('run_failed');
    expect(error.message).toMatch(/Step 'flaky.v1' failed 2 times: still down/);
    healthy = true;
    expect(await engine.run(flaky, ref, {})).toBe('done');
    const root = await storedRoot(db(), ref);
    expect(await effectCount(childKey(root, 'before.v1'))).toBe(1);
    expect(await effectCount(childKey(root, 'flaky.v1'))).toBe(1);
    expect(await engine.get(ref)).toMatchObject({ status: 'completed', attempts: 2 });
    await engine.shutdown();
  });

  it('cancels a run at its next step boundary; the step in flight does not commit', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let secondRan = false;
    let inside!: () => void;
    const inFirst = new Promise<void>((resolve) => (inside = resolve));
    const slow = defineWorkflow({
      name: 'cancellable',
      version: 1,
      input: z.object({}),
      steps: { first: step('first.v1'), second: step('second.v1') },
      async run({ steps }) {
        await steps.first.tx(async (db, context) => {
          await record('first.v1')(db, context);
          inside();
          await gate;
        });
        await steps.second.tx(async () => {
          secondRan = true;
        });
        return 'finished';
      },
    });
    const engine = testEngine(db(), [slow]);
    const ref = { scope: 'acme', key: uniqueKey('cancel') };
    const handle = await engine.start(slow, ref, {});
    // Cancelled while its first step is in flight.
    await inFirst;
    expect(await engine.cancel(ref, 'customer changed their mind')).toBe(true);
    release();
    await expect(handle.result()).rejects.toMatchObject({ code: 'run_cancelled' });
    expect(secondRan).toBe(false);
    expect(await effectCount(childKey(handle.rootKey!, 'first.v1'))).toBe(0);
    expect(await engine.get(ref)).toMatchObject({ status: 'cancelled', error: { message: 'customer changed their mind' } });
    expect(await engine.cancel(ref)).toBe(false);
    expect(await engine.attempt(slow, ref, {})).toMatchObject({ state: 'cancelled' });
    await engine.shutdown();
  });

  it("aborts ctx.signal when the run is cancelled, whether it was read before the cancel or first read after it", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const seen: { early?: AbortSignal; late?: AbortSignal } = {};
    let inFirst = 0;
    const watched = defineWorkflow({
      name: 'watched',
      version: 1,
      input: z.object({ early: z.boolean() }),
      steps: { first: step('first.v1') },
      async run({ input, steps, ctx }) {
        if (input.early) seen.early = ctx.signal;
        await steps.first.tx(async () => {
          inFirst += 1;
          await gate;
          if (!input.early) seen.late = ctx.signal;
        });
        return 'finished';
      },
    });
    const engine = testEngine(db(), [watched]);
    const early = { scope: 'acme', key: uniqueKey('signal-early') };
    const late = { scope: 'acme', key: uniqueKey('signal-late') };
    const handles = [await engine.start(watched, early, { early: true }), await engine.start(watched, late, { early: false })];
    // Both are inside their step when they are cancelled.
    await expect.poll(() => inFirst).toBe(2);
    expect(seen.early?.aborted).toBe(false);
    expect(await engine.cancel(early)).toBe(true);
    expect(await engine.cancel(late)).toBe(true);
    release();
    for (const handle of handles) await expect(handle.result()).rejects.toMatchObject({ code: 'run_cancelled' });
    for (const signal of [seen.early, seen.late]) {
      expect(signal?.aborted).toBe(true);
      expect(signal?.reason).toMatchObject({ name: 'RunStopped' });
    }
    await engine.shutdown();
  });
});
