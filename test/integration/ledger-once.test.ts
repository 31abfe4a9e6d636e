import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { beforeAll, describe, expect, it } from 'vitest';
import { NonRetryableError } from '../../src/ledger/outcome.js';
import type { TxSql } from '../../src/db/transaction.js';
import { StepkeyError } from '../../src/errors/stepkey-error.js';
import { spawnScript } from '../../src/testing/child-process.js';
import { useTestDatabase } from '../helpers/database.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 60 });

beforeAll(async () => {
  await db().sql`create table test_orders (
    id serial primary key,
    order_key text not null unique,
    amount int not null check (amount > 0))`;
});

const ordersFor = async (key: string) =>
  (await db().sql`select count(*)::int as n from test_orders where order_key = ${key}`)[0]!.n as number;

describe('once', () => {
  it('commits the business write and the outcome together, and replays it', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: 'fp', name: 'orders.create' };
    let runs = 0;
    const work = async ({ sql }: { sql: TxSql }) => {
      runs += 1;
      const [row] = await sql`insert into test_orders (order_key, amount) values (${key}, 100) returning id`;
      return { orderId: row!.id as number, note: 'z before a', z: 1, a: 2 };
    };
    const first = await ledger.once(request, work, { code: 201 });
    expect(first).toMatchObject({ state: 'executed', ok: true, outcome: { code: 201 } });
    const second = await ledger.once(request, work, { code: 201 });
    expect(second.state).toBe('replay');
    if (first.state !== 'executed' || second.state !== 'replay') return;
    expect(second.outcome.body).toBe(first.outcome.body);
    expect(second.outcome.body).toMatch(/"note":"z before a","z":1,"a":2/);
    expect(runs).toBe(1);
    expect(await ordersFor(key)).toBe(1);
  });

  it('lets exactly one of 50 concurrent calls on separate connections run', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    let executions = 0;
    const results = await Promise.all(
      Array.from({ length: 50 }, () =>
        ledger.once({ scope: 'acme', key, fingerprint: 'fp' }, async ({ sql }) => {
          executions += 1;
          await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
          await sleep(300);
          return { ok: true };
        }),
      ),
    );
    const states = results.map((r) => r.state);
    expect(executions).toBe(1);
    expect(states.filter((s) => s === 'executed')).toHaveLength(1);
    expect(states.every((s) => s === 'executed' || s === 'in_progress' || s === 'replay')).toBe(true);
    expect(await ordersFor(key)).toBe(1);
  });

  it('never runs the function again for a key completed just as a duplicate claimed it', async () => {
    // Quick functions and many duplicates: some claims start just as the winner commits.
    const ledger = testLedger(db());
    const rounds = 150;
    let executions = 0;
    for (let round = 0; round < rounds; round += 1) {
      const key = uniqueKey('race');
      const results = await Promise.all(
        Array.from({ length: 8 }, () =>
          ledger.once({ scope: 'acme', key, fingerprint: 'fp' }, async () => {
            executions += 1;
            return { round };
          }),
        ),
      );
      expect(results.filter((r) => r.state === 'executed')).toHaveLength(1);
    }
    expect(executions).toBe(rounds);
  });

  it('answers a duplicate promptly while the first call still works', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: 'fp' };
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let inside!: () => void;
    const working = new Promise<void>((resolve) => (inside = resolve));
    let firstDone = false;
    const first = ledger
      .once(request, async () => {
        inside();
        await gate;
        return 1;
      })
      .finally(() => (firstDone = true));
    // The first call holds the key and works until the gate opens; only then the duplicate comes.
    await working;
    const duplicate = await ledger.once(request, async () => 2);
    // Answered while the first still works (the gate opens only after this), not after it.
    expect(firstDone).toBe(false);
    release();
    expect(duplicate.state).toBe('in_progress');
    expect((await first).state).toBe('executed');
  });

  it('stores a deterministic error with the writes rolled back, even after a constraint violation', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: 'fp' };
    let runs = 0;
    const work = async ({ sql }: { sql: TxSql }) => {
      runs += 1;
      await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
      try {
        await sql`insert into test_orders (order_key, amount) values (${`${key}-neg`}, -1)`;
      } catch (error) {
        throw new NonRetryableError('amount must be positive', { code: 'INVALID_AMOUNT', cause: error });
      }
      return 'unreachable';
    };
    const first = await ledger.once(request, work);
    expect(first).toMatchObject({ state: 'executed', ok: false });
    if (first.state !== 'executed') return;
    // Stored with its cause: the constraint Postgres named.
    expect(JSON.parse(first.outcome.body)).toEqual({
      name: 'NonRetryableError',
      message: 'amount must be positive',
      code: 'INVALID_AMOUNT',
      cause: expect.objectContaining({ name: 'PostgresError', db: expect.objectContaining({ sqlState: '23514', constraint: 'test_orders_amount_check' }) }),
    });
    expect(await ordersFor(key)).toBe(0);
    const replay = await ledger.once(request, work);
    expect(replay).toMatchObject({ state: 'replay', outcome: { ok: false, body: first.outcome.body } });
    expect(runs).toBe(1);
  });

  it('rolls everything back and frees the key on an unexpected error', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: 'fp' };
    const boom = new Error('downstream timeout');
    await expect(
      ledger.once(request, async ({ sql }) => {
        await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await ordersFor(key)).toBe(0);
    expect(await ledger.get(request)).toBeUndefined();
    const retry = await ledger.once(request, async ({ sql }) => {
      await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
      return 'done';
    });
    expect(retry.state).toBe('executed');
    expect(await ordersFor(key)).toBe(1);
  });

  it('leaves nothing when the backend is terminated mid-work; the retry runs once', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const request = { scope: 'acme', key, fingerprint: 'fp' };
    const error = await ledger
      .once(request, async ({ sql }) => {
        await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
        const [{ pid }] = (await sql`select pg_backend_pid() as pid`) as unknown as [{ pid: number }];
        const killer = postgres(db().url, { max: 1, onnotice: () => {} });
        await killer`select pg_terminate_backend(${pid}::int)`;
        await killer.end();
        await sql`select 1`;
        return 'unreachable';
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StepkeyError);
    expect((error as StepkeyError).code).toBe('database_unavailable');
    expect(await ordersFor(key)).toBe(0);
    expect(await ledger.get(request)).toBeUndefined();

    let runs = 0;
    for (let i = 0; i < 2; i += 1) {
      // A client retries while Postgres is unavailable: the pool may still hand out the dead connection once.
      for (let attempt = 1; ; attempt += 1) {
        try {
          await ledger.once(request, async ({ sql }) => {
            runs += 1;
            await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
            return 'ok';
          });
          break;
        } catch (retryable) {
          if (!(retryable instanceof StepkeyError) || retryable.code !== 'database_unavailable' || attempt >= 3) throw retryable;
        }
      }
    }
    expect(runs).toBe(1);
    expect(await ordersFor(key)).toBe(1);
  });

  it('refuses an outcome that is not JSON and stores nothing', async () => {
    const ledger = testLedger(db());
    const key = uniqueKey();
    const error = await ledger
      .once({ scope: 'acme', key, fingerprint: 'fp' }, async ({ sql }) => {
        await sql`insert into test_orders (order_key, amount) values (${key}, 100)`;
        return { total: 10n };
      })
      .catch((e: unknown) => e);
    expect((error as StepkeyError).code).toBe('not_serializable');
    expect(await ordersFor(key)).toBe(0);
    expect(await ledger.get({ scope: 'acme', key })).toBeUndefined();
  });
});

describe('once, killed by SIGKILL', () => {
  const script = fileURLToPath(new URL('../helpers/scripts/once-child.ts', import.meta.url));

  it.each([
    ['right after the claim', 'ledger.after-claim'],
    ['just before COMMIT', 'ledger.before-commit'],
  ])('leaves neither the business row nor a key when killed %s', async (_when, fault) => {
    const key = uniqueKey();
    const child = spawnScript(script, { args: [db().url, 'acme', key], faults: fault });
    expect((await child.exited).signal).toBe('SIGKILL');
    expect(await ordersFor(key)).toBe(0);
    const ledger = testLedger(db());
    await expect.poll(async () => ledger.get({ scope: 'acme', key })).toBeUndefined();

    const retry = spawnScript(script, { args: [db().url, 'acme', key] });
    await retry.waitFor(/DONE executed/, PATIENCE_MS);
    expect(await ordersFor(key)).toBe(1);
  });

  it('keeps both when killed right after COMMIT; the retry replays', async () => {
    const key = uniqueKey();
    const child = spawnScript(script, { args: [db().url, 'acme', key], faults: 'ledger.after-commit' });
    expect((await child.exited).signal).toBe('SIGKILL');
    expect(await ordersFor(key)).toBe(1);
    const retry = spawnScript(script, { args: [db().url, 'acme', key] });
    await retry.waitFor(/DONE replay/, PATIENCE_MS);
    expect(await ordersFor(key)).toBe(1);
  });
});
