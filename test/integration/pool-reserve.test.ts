/**
 * A transaction's reservation of a pooled connection around connection
 * attempts that fail while they are set up (a server starting up answers
 * "cannot connect now" and closes): the attempt refused fails the one
 * transaction caught in it at once, and no transaction is ever left waiting
 * for a connection while the pool has one idle or coming free — postgres.js
 * 3.4 loses such waiting reservations (src/db/reserve.ts).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connect, type Database } from '../../src/db/connect.js';
import { Transaction } from '../../src/db/transaction.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';
import { proxy, type TcpProxy } from '../helpers/tcp-proxy.js';

const db = useTestDatabase({ max: 4 });
let relay: TcpProxy;

beforeAll(async () => {
  relay = proxy(new URL(db().url));
  await relay.up();
});
afterAll(() => relay.down());

/** Two transactions at once on the pool of two; each answers 'ok' or why it failed. */
async function twoAtOnce(pool: Database, sleepSeconds: number): Promise<string[]> {
  const outcomes = await Promise.allSettled(
    [0, 1].map(async () => {
      const transaction = await Transaction.begin(pool.sql, { acquireTimeoutMs: PATIENCE_MS });
      await transaction.sql`select pg_sleep(${sleepSeconds})`;
      await transaction.rollback();
      return 'ok';
    }),
  );
  return outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : (outcome.reason as Error).message));
}

it('fails only the transaction whose connection attempt was refused, and leaves no other waiting while a connection is free', async () => {
  for (let round = 1; round <= 4; round += 1) {
    // A new pool each round: both transactions open its first connections, one of them refused.
    const pool = connect(relay.url, { max: 2 });
    try {
      relay.startingUp(1);
      const outcomes = await twoAtOnce(pool, 0);
      expect(outcomes.filter((outcome) => outcome !== 'ok').length, `round ${round}: ${outcomes.join(' | ')}`).toBeLessThanOrEqual(1);
      expect(outcomes.every((outcome) => outcome === 'ok' || /starting up/.test(outcome)), `round ${round}: ${outcomes.join(' | ')}`).toBe(true);
      // Then two at once, each holding its connection a moment: both have one.
      expect(await twoAtOnce(pool, 0.3), `round ${round}`).toEqual(['ok', 'ok']);
    } finally {
      await pool.close();
    }
  }
});
