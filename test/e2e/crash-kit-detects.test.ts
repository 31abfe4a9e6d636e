/** The crash kit must catch a workflow that is not crash-safe, and say where. */
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { rootKey } from '../../src/keys/derive.js';
import { crashTest } from '../../src/testing/crash-kit.js';
import { useTestDatabase } from '../helpers/database.js';

const db = useTestDatabase();

beforeAll(async () => {
  await db().sql`create table unsafe_writes (run_key text not null)`;
});

describe('the crash kit', () => {
  it('reports which fault point broke which effect', async () => {
    const report = await crashTest({
      scenario: fileURLToPath(new URL('../helpers/scripts/unsafe.crash.ts', import.meta.url)),
      databaseUrl: db().url,
      scope: 'acme',
      env: { UNSAFE_DB: db().url },
      effects: {
        writes: async (ref) =>
          (await db().sql`select count(*)::int as n from unsafe_writes where run_key = ${rootKey(ref.scope, ref.key)}`)[0]!.n,
      },
    });
    expect(report.failures).toEqual(['engine.in-call:unsafe-write.v1: writes: 2 (expected 1)']);
    expect(report.outcomes.find((o) => o.fault === 'engine.after-step-commit:unsafe-write.v1')).toMatchObject({
      reached: true,
      effects: { writes: 1 },
      problems: [],
    });
  }, 120_000);
});
