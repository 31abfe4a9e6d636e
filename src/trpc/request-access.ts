/**
 * Getting at the HTTP request and response from a tRPC context. The defaults
 * understand the standalone / Node adapters (`ctx.req` an IncomingMessage,
 * `ctx.res` a ServerResponse) and the fetch adapter (`ctx.req` a Request,
 * `ctx.resHeaders` a Headers). `ctx.info` (what createContext receives as
 * `info`) tells batches apart; without it, the request URL does, read the way
 * tRPC's HTTP handler reads it (`?batch=1`, procedure paths joined by ',').
 */

export interface RequestAccess<Ctx> {
  /** Every value of a request header, one per header line. */
  header(ctx: Ctx, name: string): string[];
  setHeader(ctx: Ctx, name: string, value: string): void;
  /**
   * Sets the HTTP status of a successful answer (202 for a run that waits).
   * The default sets it on a Node response (`ctx.res`); with a fetch adapter,
   * return it from `responseMeta` (the answer's body says `status: 'waiting'`).
   */
  setStatus?(ctx: Ctx, status: number): void;
  /** How many operations the HTTP request carries (1 if not a batch). */
  operations(ctx: Ctx): number;
}

interface NodeLikeRequest {
  headers: Record<string, string | string[] | undefined>;
  rawHeaders?: string[];
  /** Path and query, e.g. `/trpc/a.create,b.refund?batch=1`. */
  url?: string;
}

interface FetchLikeRequest {
  headers: { get(name: string): string | null };
  /** The absolute URL. */
  url?: string;
}

type AnyCtx = {
  req?: NodeLikeRequest | FetchLikeRequest;
  res?: { setHeader?(name: string, value: string): void; statusCode?: number };
  resHeaders?: { set(name: string, value: string): void };
  info?: { isBatchCall?: boolean; calls?: unknown[] };
};

export function defaultRequestAccess<Ctx>(): RequestAccess<Ctx> {
  return {
    header(ctx, name) {
      const req = (ctx as AnyCtx).req;
      if (!req) return [];
      const headers = req.headers as { get?: unknown };
      if (typeof headers.get === 'function') {
        const value = (req as FetchLikeRequest).headers.get(name);
        return value === null ? [] : [value];
      }
      const node = req as NodeLikeRequest;
      if (node.rawHeaders) {
        const values: string[] = [];
        for (let i = 0; i + 1 < node.rawHeaders.length; i += 2) {
          if (node.rawHeaders[i]!.toLowerCase() === name.toLowerCase()) values.push(node.rawHeaders[i + 1]!);
        }
        return values;
      }
      const value = node.headers[name.toLowerCase()];
      return value === undefined ? [] : Array.isArray(value) ? value : [value];
    },
    setHeader(ctx, name, value) {
      const c = ctx as AnyCtx;
      if (c.resHeaders) c.resHeaders.set(name, value);
      else c.res?.setHeader?.(name, value);
    },
    setStatus(ctx, status) {
      // tRPC's Node adapter keeps a status other than 200 that was set before it answers.
      const { res } = ctx as AnyCtx;
      if (res && typeof res.setHeader === 'function') res.statusCode = status;
    },
    operations(ctx) {
      const { info, req } = ctx as AnyCtx;
      if (info) return info.isBatchCall ? (info.calls?.length ?? 2) : 1;
      return operationsInUrl(req?.url);
    },
  };
}

/**
 * How many operations a tRPC HTTP request names, counted as tRPC's handler
 * counts them: 1 unless the query has `batch=1`, then one per procedure path
 * in the last path segment (paths are joined by ',').
 */
function operationsInUrl(url: string | undefined): number {
  let parsed: URL;
  try {
    parsed = new URL(url ?? '', 'http://localhost');
  } catch {
    return 1; // not a URL tRPC's handler could route either
  }
  if (parsed.searchParams.get('batch') !== '1') return 1;
  const pathname = parsed.pathname.replace(/\/+$/, '');
  return pathname.slice(pathname.lastIndexOf('/') + 1).split(',').length;
}
