/**
 * The client link's retry policy, on a clock the test moves: which answers
 * it retries, for how long, and that every attempt carries the same key.
 */
import { TRPCClientError, type Operation, type OperationLink, type OperationResultEnvelope } from '@trpc/client';
import type { AnyRouter } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { idempotencyLink } from '../../src/trpc/link.js';

type Answer = { status: number; retryAfter?: string; bodyStatus?: number } | 'network' | 'ok';

/** Runs one mutation through the link; `answer(n, elapsedMs)` decides what attempt n gets. */
function mutate(answer: (attempt: number, elapsedMs: number) => Answer, options: Parameters<typeof idempotencyLink>[0] = {}) {
  const keys: string[] = [];
  const startedAt = Date.now();
  const next = (op: Operation) =>
    observable<OperationResultEnvelope<unknown, TRPCClientError<AnyRouter>>, TRPCClientError<AnyRouter>>((observer) => {
      keys.push(String(op.context.idempotencyKey));
      const given = answer(keys.length, Date.now() - startedAt);
      if (given === 'ok') {
        observer.next({ result: { type: 'data', data: { attempt: keys.length } } });
        observer.complete();
      } else if (given === 'network') {
        observer.error(TRPCClientError.from(new TypeError('fetch failed')));
      } else {
        const headers = given.retryAfter ? { 'retry-after': given.retryAfter } : undefined;
        const meta = { response: new Response(null, { status: given.status, headers }) };
        // A tRPC error body names a status of its own (its error code's), which may differ from the response's.
        const body = { error: { message: `status ${given.status}`, code: -32603, data: { httpStatus: given.bodyStatus ?? given.status } } };
        observer.error(TRPCClientError.from(body, { meta }));
      }
      return () => {};
    });
  const link = idempotencyLink(options)({} as never) as OperationLink<AnyRouter>;
  const op: Operation = { id: 1, type: 'mutation', path: 'orders.create', input: {}, context: {}, signal: null };
  const outcome = new Promise<{ ok: boolean; value: unknown }>((resolve) => {
    link({ op, next: next as never }).subscribe({
      next: (value) => resolve({ ok: true, value }),
      error: (error) => resolve({ ok: false, value: error }),
    });
  });
  return { keys, outcome };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('idempotencyLink retries', () => {
  it('by default, outlasts a lease (8 s) and a sweep (1 s) when the server gives no Retry-After', async () => {
    // The API answers 503 (or not at all) until the dead process's run is taken over, 9 s later.
    const { keys, outcome } = mutate((attempt, elapsed) => (elapsed >= 9_000 ? 'ok' : attempt % 2 ? 'network' : { status: 503 }));
    await vi.advanceTimersByTimeAsync(30_000);
    expect(await outcome).toMatchObject({ ok: true });
    expect(new Set(keys).size).toBe(1);
  });

  it('gives up after retryForMs, and honours Retry-After on the way', async () => {
    const { keys, outcome } = mutate(() => ({ status: 409, retryAfter: '2' }), { retryForMs: 10_000 });
    await vi.advanceTimersByTimeAsync(15_000);
    const result = await outcome;
    expect(result.ok).toBe(false);
    // Attempts at 0, 2, 4, 6, 8 and the last at 10 s.
    expect(keys).toHaveLength(6);
  });

  it('treats a 202 answer as final, whatever the error body says', async () => {
    const { keys, outcome } = mutate(() => ({ status: 202, bodyStatus: 409 }));
    await vi.advanceTimersByTimeAsync(30_000);
    expect((await outcome).ok).toBe(false);
    expect(keys).toHaveLength(1);
  });

  it('does not retry a 4xx answer, and stops at maxAttempts when given', async () => {
    const refused = mutate(() => ({ status: 422 }));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(refused.keys).toHaveLength(1);
    const capped = mutate(() => 'network', { maxAttempts: 3 });
    await vi.advanceTimersByTimeAsync(30_000);
    expect((await capped.outcome).ok).toBe(false);
    expect(capped.keys).toHaveLength(3);
  });
});
