/**
 * The dashboard as a fetch-style handler, `(Request) => Promise<Response>`:
 * Hono (`app.all('/ops/*', (c) => dashboard.fetch(c.req.raw))`), Next route
 * handlers (`export { GET, POST }` from one catch-all route), Bun, Deno.
 */
import { MAX_BODY, problem, securityHeaders, splitUrl, type DashboardRequest, type DashboardResponse } from './http.js';

export type FetchHandler = (request: Request, info?: { remoteAddress?: string }) => Promise<Response>;

export function fetchHandler(basePath: string, handle: (request: DashboardRequest) => Promise<DashboardResponse>): FetchHandler {
  return async (request, info = {}) => {
    let answer: DashboardResponse;
    try {
      const declared = Number(request.headers.get('content-length') ?? 0);
      const body = request.method === 'POST' && declared <= MAX_BODY ? await request.text() : undefined;
      if (declared > MAX_BODY || (body !== undefined && Buffer.byteLength(body) > MAX_BODY)) {
        answer = problem(413, 'too_large', `A request body is at most ${MAX_BODY} bytes.`);
      } else {
        const url = new URL(request.url);
        const { path, query } = splitUrl(`${url.pathname}${url.search}`, basePath);
        const headers: Record<string, string> = {};
        request.headers.forEach((value, name) => {
          headers[name] = value;
        });
        // Runtimes build the URL from the Host header; without one, the URL's host is the Host.
        headers.host ??= url.host;
        answer = await handle({
          method: request.method,
          path,
          query,
          headers,
          body,
          remoteAddress: info.remoteAddress ?? '',
          secure: url.protocol === 'https:',
        });
      }
    } catch {
      answer = problem(500, 'internal', 'The dashboard failed to answer; its log has the details.');
    }
    return new Response(answer.body as ConstructorParameters<typeof Response>[0], { status: answer.status, headers: { ...securityHeaders, ...answer.headers } });
  };
}
