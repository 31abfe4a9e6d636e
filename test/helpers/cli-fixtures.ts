/**
 * Runs for the CLI tests, made with the test app module's workflows on the
 * test file's database: completed (with a downstream payment row), failed,
 * and turned back into in-progress ones with a lease of our choosing.
 */
import { expect } from 'vitest';
import { childKey } from '../../src/keys/derive.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { TestDatabase } from './database.js';
import { testEngine } from './engine.js';
import { uniqueKey } from './ledger.js';
import { checkout, workflows } from './scripts/cli-app.js';

/** A completed cli-checkout run in `scope`, and the downstream payment row keyed by its charge step. */
export async function completedCheckout(db: TestDatabase, scope: string) {
  const engine = testEngine(db, workflows);
  const key = uniqueKey('order');
  await engine.run(checkout, { scope, key }, { cents: 500 });
  const root = (await engine.get({ scope, key }))!.rootKey;
  await engine.shutdown();
  const chargeKey = childKey(root, 'charge.v1');
  await new Ledger({ sql: db.sql }).once(
    { scope: 'payments/x', key: chargeKey, fingerprint: 'f', name: 'payments.charge' },
    async () => ({ id: 'ch_1', amountCents: 500 }),
  );
  return { key, chargeKey, confirmKey: childKey(root, 'confirm.v1') };
}

/** A cli-checkout run that failed in confirm.v1 after recording reserve.v1 and charge.v1. */
export async function failedCheckout(db: TestDatabase, scope: string): Promise<string> {
  const engine = testEngine(db, workflows);
  const key = uniqueKey('failing');
  await expect(engine.run(checkout, { scope, key }, { cents: 700, failConfirm: true })).rejects.toThrow(/mail server down/);
  await engine.shutdown();
  return key;
}

/** Turns a finished run back into one in progress, its lease ending `leaseSeconds` from now (negative: stuck). */
export async function makeInProgress(db: TestDatabase, scope: string, key: string, leaseSeconds: number): Promise<void> {
  await db.sql`
    update stepkey.ledger
       set status = 'in_progress', outcome = null, outcome_ok = null, completed_at = null, expires_at = null,
           last_error = null, lease_token = gen_random_uuid(),
           locked_until = now() + ${leaseSeconds}::float8 * interval '1 second'
     where scope = ${scope} and key = ${key}`;
}
