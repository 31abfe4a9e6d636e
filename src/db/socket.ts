/**
 * The sockets stepkey's postgres.js pools connect through, working around a
 * way in which postgres.js 3.4 leaves a pool slot hanging after its backend
 * goes away (a terminated backend, a failover; porsager/postgres#1208): when
 * a socket closes after an error, postgres.js does not reject the queries
 * sent since that error, and replays them into the slot's next connection,
 * where they wait forever for answers that never come. A socket made here
 * reports the close of an established connection as a clean one, on which
 * postgres.js rejects every query still waiting (CONNECTION_CLOSED) and
 * reconnects with a clean slate.
 *
 * The socket is handed over while it connects, as postgres.js's own is: a
 * connection that fails (ECONNREFUSED, a timeout) goes through postgres.js's
 * usual error, close and reconnect path, untouched.
 */
import { connect as netConnect, type Socket } from 'node:net';

interface ConnectOptions {
  host: string[];
  port: number[];
  path?: string | false;
}

export function connectReportingCleanClose(options: ConnectOptions): Socket {
  const socket = options.path
    ? netConnect(options.path)
    : netConnect(options.port[0] ?? 5432, options.host[0] ?? 'localhost');
  let established = false;
  socket.once('connect', () => {
    established = true;
  });
  const emit = socket.emit.bind(socket) as (event: string | symbol, ...args: unknown[]) => boolean;
  socket.emit = ((event: string | symbol, ...args: unknown[]) =>
    event === 'close' && established ? emit('close', false) : emit(event, ...args)) as Socket['emit'];
  return socket;
}
