/**
 * The client side: a tRPC link that gives each logical mutation one
 * Idempotency-Key (a UUID, minted once, before the first attempt) and retries
 * it with that same key on network errors, timeouts, 409, 429, 503 and other
 * 5xx — honouring Retry-After — a bounded number of times.
 *
 *   links: [
 *     idempotencyLink(),
 *     splitLink({
 *       condition: (op) => op.type === 'mutation',
 *       true: httpLink({ url, headers: ({ op }) => idempotencyHeaders(op) }),   // one request per keyed mutation
 *       false: httpBatchLink({ url }),
 *     }),
 *   ]
 *
 * Keyed mutations must not go through a batching link: a batch carries one
 * set of headers for several operations, and the server refuses a key on a
 * batch of more than one.
 */
import type { Operation, TRPCLink } from '@trpc/client';
import type { AnyRouter } from '@trpc/server';
import { observable } from '@trpc/server/observable';

export interface IdempotencyLinkOptions {
  /** Attempts in all, the first included (default 5). */
  maxAttempts?: number;
  /** First wait (default 200 ms), doubled each time up to maxDelayMs (default 5 s). Retry-After wins. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Which operations get a key (default: mutations). */
  keyed?: (op: Operation) => boolean;
  /** Key factory (default: crypto.randomUUID). */
  newKey?: () => string;
}

const retryableStatus = (status: number) => status === 408 || status === 409 || status === 429 || status >= 500;

interface ErrorLike {
  data?: { httpStatus?: number } | null;
  meta?: { response?: { status?: number; headers?: { get(name: string): string | null } } };
  name?: string;
  cause?: unknown;
}

function statusOf(error: ErrorLike): number | undefined {
  return error.data?.httpStatus ?? error.meta?.response?.status;
}

/** Whether an attempt's error may be retried with the same key. */
export function isRetryableError(error: unknown): boolean {
  const status = statusOf(error as ErrorLike);
  if (status === undefined) return (error as ErrorLike)?.name !== 'AbortError'; // no answer: network or timeout
  return retryableStatus(status);
}

function retryAfterMs(error: unknown): number | undefined {
  const value = (error as ErrorLike).meta?.response?.headers?.get('retry-after');
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/** The Idempotency-Key header for an operation the link keyed (for httpLink's `headers`). */
export function idempotencyHeaders(op: Operation): Record<string, string> {
  const key = op.context.idempotencyKey;
  return typeof key === 'string' ? { 'Idempotency-Key': `"${key.replace(/["\\]/g, (c) => `\\${c}`)}"` } : {};
}

export function idempotencyLink<TRouter extends AnyRouter>(options: IdempotencyLinkOptions = {}): TRPCLink<TRouter> {
  const maxAttempts = options.maxAttempts ?? 5;
  const baseDelayMs = options.baseDelayMs ?? 200;
  const maxDelayMs = options.maxDelayMs ?? 5_000;
  const keyed = options.keyed ?? ((op: Operation) => op.type === 'mutation');
  const newKey = options.newKey ?? (() => crypto.randomUUID());
  return () =>
    ({ op, next }) =>
      observable((observer) => {
        if (!keyed(op)) return next(op).subscribe(observer);
        const key = typeof op.context.idempotencyKey === 'string' ? op.context.idempotencyKey : newKey();
        const keyedOp = { ...op, context: { ...op.context, idempotencyKey: key } };
        let attempt = 0;
        let timer: ReturnType<typeof setTimeout> | undefined;
        let subscription: { unsubscribe(): void } | undefined;
        const run = () => {
          attempt += 1;
          subscription = next(keyedOp).subscribe({
            next: (value) => observer.next(value),
            error: (error) => {
              if (attempt < maxAttempts && isRetryableError(error) && !op.signal?.aborted) {
                const backoff = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
                timer = setTimeout(run, Math.min(maxDelayMs, retryAfterMs(error) ?? backoff));
              } else {
                observer.error(error);
              }
            },
            complete: () => observer.complete(),
          });
        };
        run();
        return () => {
          if (timer) clearTimeout(timer);
          subscription?.unsubscribe();
        };
      });
}
