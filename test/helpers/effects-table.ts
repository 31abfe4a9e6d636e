/**
 * A table `effects` in the test's database that tx steps write a row to, one
 * per effect: `record(step)` is such a step's body, `effectCount` how many
 * rows a run (or one of its steps) wrote — the effects that committed.
 */
import type { TxSql } from '../../src/db/transaction.js';
import type { TestDatabase } from './database.js';

export function effectsTable(db: () => TestDatabase) {
  return {
    create: async () => {
      await db().sql`create table effects (run_key text not null, step text not null, note text)`;
    },
    effectCount: async (runKey: string, stepName?: string) =>
      (
        await db().sql`select count(*)::int as n from effects
                        where run_key = ${runKey} and (${stepName ?? null}::text is null or step = ${stepName ?? null})`
      )[0]!.n as number,
    record(stepName: string) {
      return async (_db: unknown, { sql, key }: { sql: TxSql; key: string }) => {
        await sql`insert into effects (run_key, step, note) values (${key}, ${stepName}, null)`;
      };
    },
  };
}
