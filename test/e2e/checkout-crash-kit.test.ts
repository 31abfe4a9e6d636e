/**
 * The example checkout under the crash kit: a SIGKILL at every fault point,
 * resumed, and every order, charge and email exactly once.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childKey } from '../../src/keys/derive.js';
import { crashTest } from '../../src/testing/crash-kit.js';
import { startPaymentService, type PaymentService } from '../../workflows/payments/service.js';
import { seed } from '../../workflows/seed.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
let payments: PaymentService;

beforeAll(async () => {
  await seed(db());
  payments = await startPaymentService({ database: db() });
});
afterAll(() => payments.close());

const count = async (query: Promise<{ n: number }[]>) => (await query)[0]!.n;

describe('the checkout workflow under the crash kit', () => {
  it('keeps one order, one charge and one email per run, whatever point it is killed at', async () => {
    const report = await crashTest({
      scenario: fileURLToPath(new URL('../../workflows/checkout.crash.ts', import.meta.url)),
      databaseUrl: db().url,
      timeoutMs: PATIENCE_MS,
      scope: 'acme',
      env: { PAYMENTS_URL: payments.url },
      effects: {
        order: (ref) => count(db().sql`select count(*)::int as n from shop.orders where run_key = ${ref.rootKey}`),
        charge: (ref) =>
          count(db().sql`select count(*)::int as n from payments.charges
                          where idempotency_key = ${childKey(ref.rootKey, 'charge-card.v1')}`),
        email: (ref) =>
          count(db().sql`select count(*)::int as n from shop.mailbox
                          where message_key = ${childKey(ref.rootKey, 'send-confirmation.v1')}`),
      },
      callees: {
        payments: {
          step: 'charge-card.v1',
          dedupes: true,
          count: async (key) => ({ seen: payments.requestsFor(key), succeeded: payments.successesFor(key) }),
        },
      },
      // Order ids and payment ids belong to each run; the rest must match the uninterrupted run.
      compare: (result, control) => {
        const { status, ...rest } = result as { status: string; orderId: number; paymentId: string };
        return status === (control as { status: string }).status && typeof rest.orderId === 'number' && rest.paymentId.startsWith('pay_');
      },
    });
    expect(report.failures).toEqual([]);
    const reached = report.outcomes.filter((o) => o.reached).map((o) => o.fault);
    expect(reached).toEqual(
      expect.arrayContaining([
        'engine.after-step-commit:reserve-stock.v1',
        'engine.in-call:charge-card.v1',
        'outbox.after-enqueue:email.send-confirmation',
        'engine.before-complete:checkout',
        'outbox.after-apply:email.send-confirmation',
      ]),
    );
    expect(reached.length).toBeGreaterThanOrEqual(13);
    // Killed after the payment service answered: the checkout's reconcile found the charge by its key.
    expect(report.outcomes.find((o) => o.fault === 'engine.in-call:charge-card.v1')!.callees.payments).toMatchObject({
      seen: 1,
      started: 1,
      succeededEnds: 0,
      unknown: 1,
    });
  });
});
