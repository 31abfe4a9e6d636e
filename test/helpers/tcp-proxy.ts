/**
 * A TCP proxy to a test database that can be taken down and brought back on
 * the same port: a real outage (connections refused, live ones cut) for the
 * clients that connect through it — or that answers its next connections as
 * a server starting up does.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface TcpProxy {
  /** The target URL with the proxy's host and port. */
  readonly url: string;
  up(): Promise<void>;
  /** Cuts every connection and stops listening. */
  down(): Promise<void>;
  /**
   * Answers the next `count` connections as a server starting up does: its
   * refusal (SQLSTATE 57P03) to the startup message, and the close a moment
   * later, as it reaches the client.
   */
  startingUp(count: number): void;
}

/** An ErrorResponse as a server that is starting up sends it. */
function startingUpError(): Buffer {
  const fields = Buffer.from('SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0');
  const header = Buffer.alloc(5);
  header.write('E');
  header.writeUInt32BE(4 + fields.length, 1);
  return Buffer.concat([header, fields]);
}

export function proxy(target: URL): TcpProxy {
  let server: Server | undefined;
  const sockets = new Set<Socket>();
  let port = 0;
  let refuse = 0;
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
          if (refuse > 0) {
            refuse -= 1;
            client.on('error', () => client.destroy());
            client.once('data', () => {
              client.write(startingUpError());
              setTimeout(() => client.end(), 150);
            });
            return;
          }
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
    startingUp: (count) => {
      refuse = count;
    },
    down: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        sockets.clear();
        server!.close(() => resolve());
      }),
  };
}

