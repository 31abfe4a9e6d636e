/**
 * A TCP proxy to a test database that can be taken down and brought back on
 * the same port: a real outage (connections refused, live ones cut) for the
 * clients that connect through it.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface TcpProxy {
  /** The target URL with the proxy's host and port. */
  readonly url: string;
  up(): Promise<void>;
  /** Cuts every connection and stops listening. */
  down(): Promise<void>;
}

export function proxy(target: URL): TcpProxy {
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

