/**
 * Connections that go away: a pool recovers once Postgres is back, and a
 * transaction's handle kept past its end cannot write into the connection's
 * next user.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { connect } from '../../src/db/connect.js';
import { inTransaction, type TxSql } from '../../src/db/transaction.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

/** A TCP proxy to the test database that can be taken down and brought back on the same port. */
function proxy(target: URL) {
  let server: Server | undefined;
  const sockets = new Set<Socket>();
  let port = 0;
  return {
    get url() {
      const url = new URL(target);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    up: () =>
      new Promise<void>((resolve) => {
        server = createServer((client) => {
          const upstream = netConnect(Number(target.port || 5432), target.hostname);
          for (const socket of [client, upstream]) {
            sockets.add(socket);
            socket.on('error', () => socket.destroy());
            socket.on('close', () => {
              client.destroy();
              upstream.destroy();
            });
          }
          client.pipe(upstream);
          upstream.pipe(client);
        });
        server.listen(port, '127.0.0.1', () => {
          port = (server!.address() as AddressInfo).port;
          resolve();
        });
      }),
    down: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        sockets.clear();
        server!.close(() => resolve());
      }),
  };
}

describe('connections that go away', () => {
  it('a pool recovers once Postgres answers again', async () => {
    const relay = proxy(new URL(db().url));
    await relay.up();
    const pool = connect(relay.url, { max: 2 });
    try {
      expect((await pool.sql`select 1 as one`)[0]!.one).toBe(1);
      await relay.down();
      for (let i = 0; i < 4; i += 1) await expect(pool.sql`select 1 as one`).rejects.toThrow();
      await relay.up();
      await expect
        .poll(async () => (await pool.sql`select 1 as one`.catch(() => [{ one: 0 }]))[0]!.one, { timeout: 15_000 })
        .toBe(1);
      const ledger = new Ledger({ sql: pool.sql });
      expect((await ledger.claim({ scope: 'acme', key: uniqueKey(), fingerprint: 'fp' })).state).toBe('owned');
    } finally {
      await pool.close();
      await relay.down().catch(() => {});
    }
  });

  it('a handle kept past its transaction cannot write into the next transaction on its connection', async () => {
    await db().sql`create table if not exists resilience_rows (id text primary key)`;
    const single = connect(db().url, { max: 1 });
    try {
      const ledger = new Ledger({ sql: single.sql });
      let kept: TxSql | undefined;
      await ledger.once({ scope: 'acme', key: uniqueKey('kept'), fingerprint: 'fp' }, async ({ sql }) => {
        kept = sql;
        return 1;
      });
      const error = await inTransaction(single.sql, async (tx) => {
        await tx`insert into resilience_rows (id) values ('mine')`;
        await kept!`insert into resilience_rows (id) values ('stale')`;
      }).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/This transaction has ended/);
      expect(await single.sql`select id from resilience_rows`).toEqual([]);
    } finally {
      await single.close();
    }
  });
});
