/**
 * A TCP proxy to Postgres that terminates the backend of a new connection in
 * its first instants: once the server has said ReadyForQuery after startup,
 * the client's next message — the first query on that connection — is held,
 * the backend is terminated with pg_terminate_backend, and only its FATAL
 * answer and the close reach the client. Deterministic: each armed connection
 * is cut at exactly that point.
 */
import { createServer, connect as netConnect, type AddressInfo, type Server, type Socket } from 'node:net';

export interface SetupCutProxy {
  readonly url: string;
  /** Connections cut so far. */
  readonly cuts: number;
  close(): Promise<void>;
}

/** Reads the server's typed messages (type byte + int32 length) as they stream through. */
function serverMessages(onMessage: (type: string, body: Buffer) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const length = pending.readUInt32BE(1);
      if (pending.length < 1 + length) return;
      onMessage(String.fromCharCode(pending[0]!), pending.subarray(5, 1 + length));
      pending = pending.subarray(1 + length);
    }
  };
}

export async function startSetupCutProxy(target: string, terminate: (pid: number) => Promise<unknown>): Promise<SetupCutProxy> {
  const targetUrl = new URL(target);
  const sockets = new Set<Socket>();
  let cuts = 0;
  const server: Server = createServer((client) => {
    const upstream = netConnect(Number(targetUrl.port || 5432), targetUrl.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => socket.destroy());
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    let pid = 0;
    let ready = false;
    let cutting = false;
    upstream.on(
      'data',
      serverMessages((type, body) => {
        if (type === 'K') pid = body.readUInt32BE(0);
        if (type === 'Z') ready = true;
      }),
    );
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    client.on('data', (chunk: Buffer) => {
      if (cutting) return;
      if (!ready) {
        upstream.write(chunk);
        return;
      }
      // The first query after startup: hold it, and terminate the backend instead.
      cutting = true;
      cuts += 1;
      Promise.resolve(terminate(pid)).catch(() => client.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    get cuts() {
      return cuts;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
