/**
 * The sockets stepkey's postgres.js pools connect through. postgres.js 3.4
 * keeps per-connection state across reconnects that its close and reconnect
 * paths do not always reset; each behaviour below keeps a pool slot from
 * hanging after its backend goes away (a restart, a failover, a terminated
 * backend):
 *
 * - A close is reported as a clean one once the connection was established
 *   (porsager/postgres#1208): after an error close, postgres.js does not
 *   reject the queries sent since the error and replays them into the slot's
 *   next connection, where they wait forever. On a clean close it rejects every
 *   query still waiting (CONNECTION_CLOSED) and reconnects with a clean slate.
 * - A close reaches postgres.js only after its pending write has gone out.
 *   postgres.js batches a connection's writes until the next check phase
 *   (setImmediate); a close handled in between cancels that flush but leaves
 *   the batch and the cancelled timer in place, so every later connection
 *   attempt of the slot appends its startup message to the stale batch and
 *   never sends it: the slot timed out attempt after attempt, for minutes,
 *   until the batch passed 1 KB. So the close is held until the pending write
 *   reaches this socket (it is handed over from inside that write, after which
 *   postgres.js clears its batch), or until the next check phase. A write that
 *   postgres.js batches after the close and before that check phase is still
 *   cancelled: for that case a pool's startup message is itself over 1 KB
 *   (connect.ts), so the slot's next attempt flushes the stale batch with it —
 *   an attempt the server refuses at once — and the one after is clean. A
 *   connection attempt that closes having sent nothing is counted
 *   (`muteConnects`, see pool-health.ts): there should be none.
 * - On a cold start without the array-type fetch (pools run with
 *   `fetch_types: false`, see array-types.ts), a `reserve()` that opens a new
 *   connection is never handed it once it is ready (porsager/postgres#751).
 *   After the connection's first ReadyForQuery the socket emits 'drain', on
 *   which postgres.js gives an idle connection to whoever waits for one — what
 *   it does after the fetch. It is emitted at the next check phase, not at
 *   once: when postgres.js itself gave the connection away on that
 *   ReadyForQuery (a startup that carried no query), its new holder has a
 *   query in flight by then, and postgres.js ignores a drain while a query is
 *   in flight — emitted at once, it handed one connection to two holders.
 *
 * The socket is handed over while it connects, as postgres.js's own is: a
 * connection that fails (ECONNREFUSED, a timeout) goes through postgres.js's
 * usual error, close and reconnect path. (A TLS connection runs on a socket of
 * its own that postgres.js makes on top of this one; it keeps postgres.js's
 * behaviour.)
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
    /** The close, held until postgres.js's pending write has reached this socket (or there is none). */
    let heldClose: (() => void) | undefined;
    socket.once('connect', () => {
      established = true;
    });
    const startedUp = firstReadyForQuery();
    const emit = socket.emit.bind(socket) as (event: string | symbol, ...args: unknown[]) => boolean;
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      wrote = true;
      if (heldClose) {
        // postgres.js's flush, after the socket closed: hand the close over now, from inside the
        // flush, which then clears its batch. The bytes go nowhere; their queries are rejected.
        heldClose();
        return false;
      }
      return write(...args);
    }) as Socket['write'];
    socket.emit = ((event: string | symbol, ...args: unknown[]) => {
      if (event === 'close') {
        if (established && !wrote) health.muteConnects += 1;
        const hadError = established ? false : args[0];
        let delivered = false;
        heldClose = () => {
          if (delivered) return;
          delivered = true;
          emit('close', hadError);
        };
        setImmediate(heldClose);
        return true;
      }
      const handled = emit(event, ...args);
      // postgres.js has handled the startup's ReadyForQuery by now (synchronously, in its data listener).
      if (event === 'data' && startedUp(args[0] as Buffer)) {
        setImmediate(() => {
          if (!heldClose) emit('drain');
        });
      }
      return handled;
    }) as Socket['emit'];
    return socket;
  };
}
