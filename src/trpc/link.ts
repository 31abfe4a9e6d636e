/**
 * The client side: a tRPC link that gives each logical mutation one
 * Idempotency-Key (a UUID, minted once, before the first attempt, or the
 * caller's own in `context.idempotencyKey`) and retries it with that same key
 * on network errors, timeouts, 408, 409, 429 and 5xx — honouring Retry-After —
 * for a bounded time: by default longer than a run's lease plus a sweep, so
 * that a run whose process died is taken over while the client still waits.
 * Any other answer is final: a 2xx (a 202 for a run that waits, say) or a 4xx.
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
  /**
   * How long to keep retrying, from the first attempt (default 20 s). A run
   * whose process died is answered 409 until its lease (8 s by default) runs
   * out and a sweep (1 s) or the retry itself takes it over: the default
   * outlasts both.
   */
  retryForMs?: number;
  /** Attempts in all, the first included (default: as many as fit in retryForMs). */
  maxAttempts?: number;
  /** First wait (default 200 ms), doubled each time up to maxDelayMs (default 5 s). Retry-After wins, up to maxDelayMs. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Which operations get a key (default: mutations). */
  keyed?: (op: Operation) => boolean;
  /** Key factory (default: crypto.randomUUID). */
  newKey?: () => string;
}

/** The default retry budget: one lease (8 s) and one sweep (1 s), with room for the resumed run to answer. */
export const DEFAULT_RETRY_FOR_MS = 20_000;

const retryableStatus = (status: number) => status === 408 || status === 409 || status === 429 || status >= 500;

interface ErrorLike {
  data?: { httpStatus?: number } | null;
  meta?: { response?: { status?: number; headers?: { get(name: string): string | null } } };
  name?: string;
  cause?: unknown;
}

/** The answer's HTTP status: the response's own when there was one, else the one tRPC put in the error. */
function statusOf(error: ErrorLike): number | undefined {
  return error.meta?.response?.status ?? error.data?.httpStatus ?? undefined;
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
  const retryForMs = options.retryForMs ?? DEFAULT_RETRY_FOR_MS;
  const maxAttempts = options.maxAttempts ?? Number.POSITIVE_INFINITY;
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
        const startedAt = Date.now();
        let attempt = 0;
        let timer: ReturnType<typeof setTimeout> | undefined;
        let subscription: { unsubscribe(): void } | undefined;
        const run = () => {
          attempt += 1;
          subscription = next(keyedOp).subscribe({
            next: (value) => observer.next(value),
            error: (error) => {
              const left = retryForMs - (Date.now() - startedAt);
              if (attempt < maxAttempts && left > 0 && isRetryableError(error) && !op.signal?.aborted) {
                const backoff = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
                timer = setTimeout(run, Math.min(left, maxDelayMs, retryAfterMs(error) ?? backoff));
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
