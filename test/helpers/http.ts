/** Plain HTTP calls to a tRPC endpoint, as any client would make them. */
import { connect } from 'node:net';

export interface Answer {
  status: number;
  body: string;
  headers: Headers;
  json: unknown;
}

export async function post(
  url: string,
  path: string,
  input: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const response = await fetch(`${url}/${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(input),
  });
  const body = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: response.status, body, headers: response.headers, json };
}

/** A request with the given header lines, exactly as written (repeated lines included). */
export function rawPost(url: string, path: string, input: unknown, lines: string[]): Promise<{ status: number; body: string }> {
  const target = new URL(`${url}/${path}`);
  const body = JSON.stringify(input);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(target.port), target.hostname, () => {
      socket.write(
        [
          `POST ${target.pathname} HTTP/1.1`,
          `Host: ${target.host}`,
          'Content-Type: application/json',
          `Content-Length: ${Buffer.byteLength(body)}`,
          'Connection: close',
          ...lines,
          '',
          body,
        ].join('\r\n'),
      );
    });
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString('utf8')));
    socket.on('error', reject);
    socket.on('end', () => {
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1]);
      resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
    });
  });
}
