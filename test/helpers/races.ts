/**
 * What the race tests (waits-races*.test.ts) interleave by hand with, on the
 * test's database: a gate (a test connection holding an open transaction,
 * whose uncommitted row a statement of stepkey's must wait for), a wait until
 * that many backends wait for a lock, the deadlocks PostgreSQL has detected,
 * and a run's status.
 */
import type { TestDatabase } from './database.js';
import { LONG_LEASE_MS, PATIENCE_MS } from './patience.js';

/** A step the test holds at a gate: no attempt timeout cuts it first, however long a busy host takes. */
export const heldStep = { timeoutMs: LONG_LEASE_MS };

export function raceKit(db: () => TestDatabase) {
  return {
    /** Waits until `count` backends of this database wait for a lock in a statement containing `text` (bounded). */
    async lockWaiters(count: number, text = ''): Promise<void> {
      const deadline = Date.now() + PATIENCE_MS;
      while (Date.now() < deadline) {
        const [row] = await db().sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
           where datname = current_database() and wait_event_type = 'Lock' and strpos(query, ${text}) > 0`;
        if (row!.n >= count) return;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      throw new Error(`never saw ${count} backends waiting for a lock within ${PATIENCE_MS} ms`);
    },
    /** Deadlocks PostgreSQL has detected in this database (its statistics lag a moment: poll). */
    deadlocks: async () =>
      (await db().sql<{ n: number }[]>`select deadlocks::int as n from pg_stat_database where datname = current_database()`)[0]!.n,
    /** A test connection with an open transaction: the gate. */
    async openGate() {
      const conn = await db().sql.reserve();
      await conn`begin`;
      return {
        sql: conn,
        async release() {
          await conn`rollback`;
          conn.release();
        },
      };
    },
    status: async (scope: string, key: string) =>
      (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${scope} and key = ${key}`)[0]?.status,
  };
}
