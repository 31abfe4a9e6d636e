/**
 * A stand-in payment service: what a real payment provider looks like from
 * the shop's side. Plain node:http, its charges keyed per merchant with
 * stepkey/http — the Idempotency-Key semantics a shop must be able to rely
 * on, from the same core as the shop's own tRPC API:
 *
 *   POST /v1/charges   Authorization: Bearer <merchant>, Idempotency-Key: <key>
 *                      { amountCents, currency, reference } → 201 charge
 *     the same key again          → the same 201, byte for byte, Idempotent-Replayed: true
 *     while the first still runs  → 409 + Retry-After
 *     same key, other body        → 422
 *     a body that is not a charge → 400, stored and replayed like any client error
 *   GET /v1/charges?reference=R         the merchant's charges for a reference
 *   GET /v1/charges?idempotencyKey=K    the merchant's charge made with that key, if any:
 *                                       what a caller asks when it cannot tell whether
 *                                       an earlier request went through
 *
 * It can be told to fail a fraction of charges with 503 (never stored: the
 * retry runs) or to answer slowly: PAYMENTS_FAIL_RATE, PAYMENTS_DELAY_MS, or
 * at run time (the demo does) with POST /admin/settings { failRate, delayMs }
 * when started with `admin: true`.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { Ledger, StepkeyError, type Database } from 'stepkey';
import { createNodeIdempotency } from 'stepkey/http';

export interface PaymentServiceOptions {
  database: Database;
  port?: number;
  host?: string;
  /** Fraction (0–1) of charges refused with 503 before any work. */
  failRate?: number;
  /** Extra time a charge takes, holding its key. */
  delayMs?: number;
  /** Serve POST /admin/settings to change failRate and delayMs at run time. */
  admin?: boolean;
}

export interface PaymentService {
  readonly url: string;
  /** How many charge requests arrived with this idempotency key (replays included). */
  requestsFor(idempotencyKey: string): number;
  /** How many of those were answered with the charge (201, replays included). */
  successesFor(idempotencyKey: string): number;
  failRate: number;
  delayMs: number;
  close(): Promise<void>;
}

const chargeInput = z.object({
  amountCents: z.number().int().positive(),
  currency: z.string().regex(/^[A-Z]{3}$/),
  reference: z.string().min(1).max(200),
});

/** Charge ids derive from the merchant and the idempotency key: one key, one charge id. */
export function chargeId(merchant: string, idempotencyKey: string): string {
  return `pay_${createHash('sha256').update(`${merchant}:${idempotencyKey}`).digest('hex').slice(0, 24)}`;
}

/** The merchant a request is from: its bearer token. */
function merchantOf(req: IncomingMessage): string | undefined {
  return /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
}

export async function startPaymentService(options: PaymentServiceOptions): Promise<PaymentService> {
  const sql = options.database.sql;
  const state = {
    failRate: options.failRate ?? Number(process.env.PAYMENTS_FAIL_RATE ?? 0),
    delayMs: options.delayMs ?? Number(process.env.PAYMENTS_DELAY_MS ?? 0),
  };
  const requests = new Map<string, number>();
  const successes = new Map<string, number>();

  const idempotency = createNodeIdempotency({
    ledger: new Ledger({ sql }),
    scope: (req) => {
      const merchant = merchantOf(req);
      return merchant ? `payments/${merchant}` : null;
    },
    maxBodyBytes: 65_536,
  });
  const createCharge = idempotency.handler({ route: 'payments.charge' }, async (req, { body, idempotency: { key, sql: tx } }) => {
    const parsed = chargeInput.safeParse(body.json);
    if (!parsed.success) return { status: 400, body: { error: 'invalid charge', issues: parsed.error.issues } };
    if (state.failRate > 0 && Math.random() < state.failRate) {
      return { status: 503, headers: { 'Retry-After': '1' }, body: { error: 'payment processor unavailable, retry later' } };
    }
    if (state.delayMs > 0) await sleep(state.delayMs);
    const charge = { id: chargeId(merchantOf(req)!, key), ...parsed.data };
    await tx`
      insert into payments.charges (id, merchant, idempotency_key, amount_cents, currency, reference)
      values (${charge.id}, ${merchantOf(req)!}, ${key}, ${charge.amountCents}, ${charge.currency}, ${charge.reference})`;
    return { status: 201, body: { id: charge.id, amountCents: charge.amountCents, currency: charge.currency, reference: charge.reference } };
  });

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      const status = error instanceof StepkeyError ? error.httpStatus : 500;
      if (status < 500) return send(res, status, { error: error instanceof Error ? error.message : String(error) });
      // Its own failures (its database down, say) stay in its log: a caller learns only that it may retry.
      console.error(`payments: ${req.method} ${req.url} failed:`, error);
      send(res, 503, { error: 'payment service unavailable, retry later' }, { 'Retry-After': '1' });
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname === '/health') return send(res, 200, { ok: true });
    if (options.admin && req.method === 'POST' && url.pathname === '/admin/settings') {
      const settings = z.object({ failRate: z.number().min(0).max(1).optional(), delayMs: z.number().int().min(0).optional() }).safeParse(await readJson(req));
      if (!settings.success) return send(res, 400, { error: 'expected { failRate?: 0..1, delayMs?: ms }' });
      Object.assign(state, settings.data);
      return send(res, 200, state);
    }
    const merchant = merchantOf(req);
    if (!merchant) return send(res, 401, { error: 'Authorization: Bearer <merchant> is required' });

    if (req.method === 'GET' && url.pathname === '/v1/charges') {
      const reference = url.searchParams.get('reference');
      const idempotencyKey = url.searchParams.get('idempotencyKey');
      if (reference === null && idempotencyKey === null) return send(res, 400, { error: 'reference or idempotencyKey is required' });
      const rows = await sql`
        select id, amount_cents as "amountCents", currency, reference, idempotency_key as "idempotencyKey"
          from payments.charges
         where merchant = ${merchant}
           and (${reference}::text is null or reference = ${reference}::text)
           and (${idempotencyKey}::text is null or idempotency_key = ${idempotencyKey}::text)
         order by created_at`;
      return send(res, 200, { charges: rows });
    }
    if (req.method !== 'POST' || url.pathname !== '/v1/charges') return send(res, 404, { error: 'not found' });

    // What the tests and the demo count: every charge request that carries a key, and each answered with the charge.
    const key = req.headers['idempotency-key'];
    if (typeof key === 'string') {
      requests.set(key, (requests.get(key) ?? 0) + 1);
      res.once('finish', () => {
        if (res.statusCode === 201) successes.set(key, (successes.get(key) ?? 0) + 1);
      });
    }
    createCharge(req, res);
  }

  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requestsFor: (key) => requests.get(key) ?? 0,
    successesFor: (key) => successes.get(key) ?? 0,
    get failRate() {
      return state.failRate;
    },
    set failRate(value: number) {
      state.failRate = value;
    },
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(value: number) {
      state.delayMs = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 65_536) throw new StepkeyError('invalid_input', 'request body over 64 KiB');
  }
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}
