/**
 * The keyed load: a bounded number of clients, each sending checkouts one
 * after another, every one with its own Idempotency-Key, through the
 * client link stepkey ships (`idempotencyLink` + `httpLink`): the link retries
 * with the same key on network errors, 408/409/429 and 5xx, honouring
 * Retry-After; when its budget runs out the client sends the same key again,
 * until the order has an answer or the suite's deadline passes. Every HTTP
 * attempt is counted by its status, and every 5xx body is checked for text
 * that only the database driver or the caller's data could have put there.
 */
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink, isRetryableError } from '../../src/trpc/link.js';
import type { ApiRouter } from '../../workflows/api/router.js';
import { chaosSku } from './app.js';
import { leaksInternals } from './leaks.js';

export interface KeyRecord {
  tenant: string;
  key: string;
  email: string;
  /** HTTP attempts sent with this key. */
  attempts: number;
  /** The 200's body. */
  answer?: { orderId: number; paymentId: string; status: string };
  /** A final answer that is not a 200 (a 4xx the link does not retry), or why the client gave up. */
  failure?: string;
}

export interface LoadFigures {
  keys: KeyRecord[];
  /** HTTP attempts by status ('200', '503', 'network error', 'timeout', …). */
  statuses: Map<string, number>;
  /** Every 5xx answer that quoted driver text, SQL or the caller's data (a sample of their bodies). */
  leaks: string[];
  leakCount: number;
  /** 503s without Retry-After. */
  unavailableWithoutRetryAfter: number;
  /** Distinct 5xx messages seen, with counts. */
  serverErrors: Map<string, number>;
  /** Requests the API did not answer within 30 s: which key, when it was sent (ms from the start of the load). */
  unanswered: { key: string; sentMs: number }[];
}

const tenants = ['acme', 'globex', 'initech'];
const requestTimeoutMs = 30_000;

export interface Load {
  /** Stops starting new keys; resolves when every client's last key has its answer (or the deadline passed). */
  stop(): Promise<void>;
  readonly figures: LoadFigures;
}

export function startLoad(options: { apiUrl: string; clients: number; seed: number; deadline: () => number }): Load {
  const figures: LoadFigures = { keys: [], statuses: new Map(), leaks: [], leakCount: 0, unavailableWithoutRetryAfter: 0, serverErrors: new Map(), unanswered: [] };
  const began = Date.now();
  const count = (map: Map<string, number>, name: string) => map.set(name, (map.get(name) ?? 0) + 1);
  let stopping = false;
  // At the deadline every client gives up, even in the middle of a request or of the link's retries.
  const giveUp = new AbortController();

  const recordingFetch = (record: () => KeyRecord | undefined) =>
    async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      const keyRecord = record();
      if (keyRecord) keyRecord.attempts += 1;
      const sentMs = Date.now() - began;
      const signal = init?.signal ? AbortSignal.any([init.signal, AbortSignal.timeout(requestTimeoutMs)]) : AbortSignal.timeout(requestTimeoutMs);
      let response: Response;
      try {
        response = await fetch(input, { ...init, signal });
      } catch (error) {
        const timedOut = (error as Error).name === 'TimeoutError';
        count(figures.statuses, timedOut ? 'timeout' : 'network error');
        if (timedOut) figures.unanswered.push({ key: keyRecord ? `${keyRecord.tenant}/${keyRecord.key}` : '?', sentMs });
        throw error;
      }
      count(figures.statuses, String(response.status));
      if (response.status >= 500) {
        const body = await response.clone().text().catch(() => '');
        const message = /"message":"((?:[^"\\]|\\.)*)"/.exec(body)?.[1] ?? body.slice(0, 200);
        count(figures.serverErrors, `${response.status} ${message.slice(0, 160)}`);
        if (leaksInternals(body)) {
          figures.leakCount += 1;
          if (figures.leaks.length < 10) figures.leaks.push(`${response.status} ${body.slice(0, 400)}`);
        }
        if (response.status === 503 && !response.headers.get('retry-after')) figures.unavailableWithoutRetryAfter += 1;
      }
      return response;
    };

  async function client(index: number): Promise<void> {
    const tenant = tenants[index % tenants.length]!;
    let current: KeyRecord | undefined;
    const trpc = createTRPCClient<ApiRouter>({
      links: [
        idempotencyLink({ retryForMs: 30_000, maxDelayMs: 2_000 }),
        httpLink({
          url: options.apiUrl,
          fetch: recordingFetch(() => current),
          headers: ({ op }) => ({ ...idempotencyHeaders(op), Authorization: `Bearer ${tenant}` }),
        }),
      ],
    });
    for (let n = 0; !stopping; n += 1) {
      const key = `chaos-${options.seed}-${index}-${n}`;
      const email = `client${index}+${n}@example.com`;
      current = { tenant, key, email, attempts: 0 };
      figures.keys.push(current);
      for (;;) {
        try {
          const answer = await trpc.orders.create.mutate({ sku: chaosSku, quantity: 1, email }, { context: { idempotencyKey: key }, signal: giveUp.signal });
          current.answer = answer;
          break;
        } catch (error) {
          if (!isRetryableError(error)) {
            current.failure = `answered ${(error as { data?: { httpStatus?: number } }).data?.httpStatus ?? '?'}: ${(error as Error).message}`;
            break;
          }
          if (Date.now() > options.deadline() || giveUp.signal.aborted) {
            current.failure = `no answer before the deadline (last: ${(error as Error).message})`;
            break;
          }
          // The link's budget ran out: the same key again, as a caller that still wants its order would.
          await new Promise((resolve) => setTimeout(resolve, 1_000));
        }
      }
    }
  }

  const running = Promise.all(Array.from({ length: options.clients }, (_, i) => client(i)));
  return {
    figures,
    stop: async () => {
      stopping = true;
      const timer = setInterval(() => {
        if (Date.now() > options.deadline()) giveUp.abort();
      }, 500);
      await running;
      clearInterval(timer);
    },
  };
}
