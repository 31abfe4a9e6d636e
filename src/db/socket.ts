/**
 * The sockets stepkey's postgres.js pools connect through, working around two
 * ways in which postgres.js 3.4 leaves a pool slot hanging:
 *
 * - After its backend goes away (a terminated backend, a failover;
 *   porsager/postgres#1208): when a socket closes after an error, postgres.js
 *   does not reject the queries sent since that error, and replays them into
 *   the slot's next connection, where they wait forever for answers that
 *   never come. A socket made here reports the close of an established
 *   connection as a clean one, on which postgres.js rejects every query still
 *   waiting (CONNECTION_CLOSED) and reconnects with a clean slate.
 * - On a cold start without the array-type fetch (pools run with
 *   `fetch_types: false`, see array-types.ts): a `reserve()` that opens a new
 *   connection is never handed that connection once it is ready
 *   (porsager/postgres#751). Right after the connection's first
 *   ReadyForQuery, the socket emits 'drain', on which postgres.js gives an
 *   idle connection to whoever waits for one — what it does after the fetch.
 *   With a query of its own in flight the connection is busy and 'drain'
 *   does nothing, as postgres.js's own drains do.
 *
 * The socket is handed over while it connects, as postgres.js's own is: a
 * connection that fails (ECONNREFUSED, a timeout) goes through postgres.js's
 * usual error, close and reconnect path, untouched. (A TLS connection runs on
 * a socket of its own that postgres.js makes on top of this one; it keeps
 * postgres.js's behaviour.)
 */
import { connect as netConnect, type Socket } from 'node:net';
import type { PoolHealth } from './pool-health.js';

interface ConnectOptions {
  host: string[];
  port: number[];
  path?: string | false;
}

/**
 * Watches the server's typed messages (type byte + int32 length) until the
 * first ReadyForQuery. A startup answers with an authentication message ('R')
 * first; anything else (the one-byte answer to a TLS request) stops the watch.
 */
function firstReadyForQuery(): (chunk: Buffer) => boolean {
  let pending: Buffer = Buffer.alloc(0);
  let seen = false;
  return (chunk) => {
    if (seen) return false;
    if (pending.length === 0 && chunk[0] !== 0x52 /* R */ && chunk[0] !== 0x45 /* E */) {
      seen = true;
      return false;
    }
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const type = pending[0];
      const length = pending.readUInt32BE(1);
      if (pending.length < 1 + length) return false;
      pending = pending.subarray(1 + length);
      if (type === 0x5a /* Z */) {
        seen = true;
        pending = Buffer.alloc(0);
        return true;
      }
    }
    return false;
  };
}

/** The `socket` option of a pool: a connect function whose sockets behave as described above. */
export function socketsFor(health: PoolHealth): (options: ConnectOptions) => Socket {
  return (options) => {
    const socket = options.path
      ? netConnect(options.path)
      : netConnect(options.port[0] ?? 5432, options.host[0] ?? 'localhost');
    let established = false;
    let wrote = false;
    socket.once('connect', () => {
      established = true;
    });
    const startedUp = firstReadyForQuery();
    const emit = socket.emit.bind(socket) as (event: string | symbol, ...args: unknown[]) => boolean;
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      wrote = true;
      return write(...args);
    }) as Socket['write'];
    socket.emit = ((event: string | symbol, ...args: unknown[]) => {
      if (event === 'close' && established && !wrote) health.muteConnects += 1;
      if (event === 'close' && established) return emit('close', false);
      const handled = emit(event, ...args);
      // postgres.js has handled the startup's ReadyForQuery by now (synchronously, in its data listener).
      if (event === 'data' && startedUp(args[0] as Buffer)) emit('drain');
      return handled;
    }) as Socket['emit'];
    return socket;
  };
}
