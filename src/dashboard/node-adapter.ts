/**
 * The dashboard as a Node request listener: node:http, Express
 * (`app.use('/ops', dashboard.node)`: Express strips the mount path, the
 * handler accepts either), Fastify (`reply.hijack()` and the raw request).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { MAX_BODY, problem, securityHeaders, splitUrl, type DashboardRequest, type DashboardResponse } from './http.js';

export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => void;

export function nodeHandler(basePath: string, handle: (request: DashboardRequest) => Promise<DashboardResponse>): NodeHandler {
  return (req, res) => {
    void (async () => {
      let answer: DashboardResponse;
      try {
        const body = req.method === 'POST' ? await readBody(req) : undefined;
        if (body === null) answer = problem(413, 'too_large', `A request body is at most ${MAX_BODY} bytes.`);
        else {
          const { path, query } = splitUrl(req.url ?? '/', basePath);
          const headers: Record<string, string | undefined> = {};
          for (const [name, value] of Object.entries(req.headers)) headers[name] = Array.isArray(value) ? value.join(', ') : value;
          answer = await handle({
            method: req.method ?? 'GET',
            path,
            query,
            headers,
            body,
            remoteAddress: req.socket.remoteAddress ?? '',
            secure: Boolean((req.socket as TLSSocket).encrypted),
          });
        }
      } catch {
        answer = problem(500, 'internal', 'The dashboard failed to answer; its log has the details.');
      }
      if (res.headersSent) return;
      res.writeHead(answer.status, { ...securityHeaders, ...answer.headers });
      res.end(answer.body);
    })();
  };
}

/** The body as text, or null when it is too large. */
async function readBody(req: IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
