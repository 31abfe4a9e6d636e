/**
 * The dashboard's requests and answers, apart from any server: the Node
 * adapter (node-adapter.ts) and the fetch adapter (fetch-adapter.ts) turn
 * their framework's objects into these and back.
 */

export interface DashboardRequest {
  method: string;
  /** The path below the dashboard's base path, always starting with '/'. */
  path: string;
  query: URLSearchParams;
  /** Lower-cased header names. */
  headers: Readonly<Record<string, string | undefined>>;
  /** The body of a POST, as text (at most MAX_BODY bytes). */
  body: string | undefined;
  remoteAddress: string;
  /** Whether the request came over TLS (for the cookie's Secure flag). */
  secure: boolean;
}

export interface DashboardResponse {
  status: number;
  headers: Record<string, string>;
  body: string | Uint8Array;
}

export const MAX_BODY = 16 * 1024;

/** Headers every answer carries: nothing may frame, sniff or load from elsewhere. */
export const securityHeaders: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "font-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

export function json(status: number, value: unknown, headers: Record<string, string> = {}): DashboardResponse {
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', ...headers },
    body: JSON.stringify(value),
  };
}

export function problem(status: number, code: string, message: string, headers: Record<string, string> = {}): DashboardResponse {
  return json(status, { error: { code, message } }, headers);
}

/** Splits a URL's path (already below the base path) and query. */
export function splitUrl(url: string, basePath: string): { path: string; query: URLSearchParams } {
  const parsed = new URL(url, 'http://dashboard.invalid');
  let path = parsed.pathname;
  if (basePath !== '/' && (path === basePath || path.startsWith(`${basePath}/`))) path = path.slice(basePath.length);
  return { path: path === '' ? '/' : path, query: parsed.searchParams };
}
