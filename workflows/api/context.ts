/**
 * The order API's context. The caller is whoever the bearer token names — a
 * stand-in for real authentication: the token is the tenant.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TRPCRequestInfo } from '@trpc/server/http';

export interface ApiContext {
  req: IncomingMessage;
  res: ServerResponse;
  info: TRPCRequestInfo;
  tenant: string | null;
}

const bearer = /^Bearer ([A-Za-z0-9._-]{1,64})$/;

export function createContext({ req, res, info }: { req: IncomingMessage; res: ServerResponse; info: TRPCRequestInfo }): ApiContext {
  return { req, res, info, tenant: bearer.exec(req.headers.authorization ?? '')?.[1] ?? null };
}
