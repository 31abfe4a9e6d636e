/**
 * A transaction's reservation of a pooled connection around connection
 * attempts that fail while they are set up (a server starting up answers
 * "cannot connect now" and closes): the attempt refused fails the one
 * transaction caught in it at once, and no transaction is ever left waiting
 * for a connection while the pool has one idle or coming free — postgres.js
 * 3.4 loses such waiting reservations (src/db/reserve.ts).
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connect, type Database } from '../../src/db/connect.js';
import { Transaction } from '../../src/db/transaction.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 4 });
/** How many of the next connections the relay answers as a server starting up. */
let refuseNext = 0;
let relay: Server;
let url = '';

/** An ErrorResponse as a server that is starting up sends it (SQLSTATE 57P03). */
function startingUp(): Buffer {
  const fields = Buffer.from('SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0');
  const header = Buffer.alloc(5);
  header.write('E');
  header.writeUInt32BE(4 + fields.length, 1);
  return Buffer.concat([header, fields]);
}

beforeAll(async () => {
  const target = new URL(db().url);
  relay = createServer((client: Socket) => {
    if (refuseNext > 0) {
      refuseNext -= 1;
      // Its answer to the startup message, and the close a moment later (as it reaches the client).
      client.once('data', () => {
        client.write(startingUp());
        setTimeout(() => client.end(), 150);
      });
      return;
    }
    const upstream = netConnect(Number(target.port || 5432), target.hostname);
    for (const [one, other] of [[client, upstream], [upstream, client]] as const) {
      one.on('error', () => other.destroy());
      one.on('close', () => other.destroy());
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  const relayed = new URL(db().url);
  relayed.hostname = '127.0.0.1';
  relayed.port = String((relay.address() as AddressInfo).port);
  url = relayed.toString();
});
afterAll(async () => {
  await new Promise<void>((resolve) => relay.close(() => resolve()));
});

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
    const pool = connect(url, { max: 2 });
    try {
      refuseNext = 1;
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
