/** The crash kit must catch a workflow that is not crash-safe, and say where. */
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { crashTest } from '../../src/testing/crash-kit.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();

beforeAll(async () => {
  await db().sql`create table unsafe_writes (run_key text not null, key text not null)`;
});

describe('the crash kit', () => {
  it('reports which fault point broke which effect', async () => {
    const report = await crashTest({
      scenario: fileURLToPath(new URL('../helpers/scripts/unsafe.crash.ts', import.meta.url)),
      databaseUrl: db().url,
      timeoutMs: PATIENCE_MS,
      scope: 'acme',
      env: { UNSAFE_DB: db().url },
      effects: {
        writes: async (ref) =>
          (await db().sql`select count(*)::int as n from unsafe_writes where run_key = ${ref.rootKey}`)[0]!.n,
      },
      callees: {
        writer: {
          step: 'unsafe-write.v1',
          dedupes: false,
          count: async (key) => {
            const [row] = await db().sql`select count(*)::int as n from unsafe_writes where key = ${key}`;
            return { seen: row!.n, succeeded: row!.n };
          },
        },
      },
    });
    const inCall = report.outcomes.find((o) => o.fault === 'engine.in-call:unsafe-write.v1')!;
    expect(report.failures).toEqual([
      'engine.in-call:unsafe-write.v1: writes: 2 (expected 1)',
      `engine.in-call:unsafe-write.v1: writer (step unsafe-write.v1, key ${inCall.callees.writer!.key}) does not dedupe and saw the key 2 times: give step 'unsafe-write.v1' a reconcile, or atMostOnce`,
    ]);
    // Killed after the write answered: two attempts started, one ended; the callee saw the key twice.
    expect(inCall.callees.writer).toMatchObject({ seen: 2, started: 2, succeededEnds: 1, unknown: 1 });
    // Killed before the call: the attempt was recorded and never reached the callee.
    expect(report.outcomes.find((o) => o.fault === 'engine.before-call:unsafe-write.v1')).toMatchObject({
      reached: true,
      callees: { writer: { seen: 1, started: 2, succeededEnds: 1, unknown: 1 } },
      problems: [],
    });
    expect(report.outcomes.find((o) => o.fault === 'engine.after-step-commit:unsafe-write.v1')).toMatchObject({
      reached: true,
      effects: { writes: 1 },
      callees: { writer: { seen: 1, started: 1, succeededEnds: 1, unknown: 0 } },
      problems: [],
    });
  });
});
