/**
 * The sockets stepkey's postgres.js pools connect through, working around a
 * way in which postgres.js 3.4 leaves a pool slot hanging after its backend
 * goes away (a terminated backend, a failover; porsager/postgres#1208): when
 * a socket closes after an error, postgres.js does not reject the queries
 * sent since that error, and replays them into the slot's next connection,
 * where they wait forever for answers that never come. A socket made here
 * reports every close as a clean one, on which postgres.js rejects every
 * query still waiting (CONNECTION_CLOSED) and reconnects with a clean slate.
 */
import { connect as netConnect, type Socket } from 'node:net';

interface ConnectOptions {
  host: string[];
  port: number[];
  path?: string | false;
  connect_timeout?: number;
}

export function connectReportingCleanClose(options: ConnectOptions): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = options.path
      ? netConnect(options.path)
      : netConnect(options.port[0] ?? 5432, options.host[0] ?? 'localhost');
    const timeoutMs = (options.connect_timeout ?? 30) * 1000;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(Object.assign(new Error(`connect timeout after ${timeoutMs} ms`), { code: 'CONNECT_TIMEOUT' }));
    }, timeoutMs);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      const emit = socket.emit.bind(socket) as (event: string | symbol, ...args: unknown[]) => boolean;
      socket.emit = ((event: string | symbol, ...args: unknown[]) =>
        event === 'close' ? emit('close', false) : emit(event, ...args)) as Socket['emit'];
      resolve(socket);
    });
  });
}
