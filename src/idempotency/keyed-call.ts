/**
 * Claim-and-commit around the work of one keyed call — an idempotent tRPC
 * procedure's resolver, an HTTP handler — and the answers of the IETF
 * Idempotency-Key draft and of Stripe's API:
 *
 *   first call        the work runs inside the key's claim (ledger.once); its
 *                     writes commit with the stored answer
 *   repeat            the stored answer ('replay'); the adapter marks it
 *                     Idempotent-Replayed and sends it byte for byte
 *   while in progress 409 + Retry-After, at once
 *   another input or another operation with the key   422, nothing changes
 *   the work fails    what `storeError` accepts is stored and replayed; anything
 *                     else rolls back, releases the key and is rethrown
 *   Postgres unavailable   503 + Retry-After (fail closed), or — before the
 *                     work ran — 'bypassed' when the call fails open; other
 *                     database failures 500 without the driver's message
 *
 * Refusals are thrown as Refusal; an error the work threw that is not
 * stored is rethrown as it is, for the adapter to answer.
 */
import { isStepkeyError } from '../errors/stepkey-error.js';
import type { Ledger } from '../ledger/ledger.js';
import type { OutcomeToStore, StoredOutcome } from '../ledger/types.js';
import { instrument } from '../telemetry/instrumentation.js';
import type { RequestFingerprints } from './fingerprints.js';
import type { ErrorReport } from './internal-failure.js';
import type { KeyedRequest } from './keyed-request.js';
import type { IdempotencyContext, KeyedCallOptions } from './options.js';
import { inProgress, mismatch, type RequestNoun } from './refusal.js';
import { refusalOf } from './service-failure.js';

export interface KeyedCall {
  ledger: Ledger;
  request: KeyedRequest;
  fingerprints: RequestFingerprints;
  /** The procedure's path or the route's name: the ledger row's name. */
  name: string;
  noun: RequestNoun;
  options: Pick<KeyedCallOptions, 'onLedgerDown' | 'retentionMs'>;
  report: ErrorReport;
}

/** How the work's answer is stored. */
export interface KeyedStorage<T> {
  serialize: (value: T) => string;
  /** The status stored with a success. */
  code: number | ((value: T) => number | null);
  /** What to store for an error the work threw, or undefined to roll back, release the key and rethrow. */
  storeError: (error: unknown) => OutcomeToStore | undefined;
}

export type KeyedOutcome<T> =
  | { state: 'executed'; ok: true; value: T; outcome: StoredOutcome }
  | { state: 'executed'; ok: false; error: unknown; outcome: StoredOutcome }
  | { state: 'replay'; outcome: StoredOutcome }
  /** Postgres is unavailable, the call fails open, and the work has not run: run it without idempotency. */
  | { state: 'bypassed' };

export async function runKeyed<T>(
  call: KeyedCall,
  work: (context: IdempotencyContext) => Promise<T>,
  storage: KeyedStorage<T>,
): Promise<KeyedOutcome<T>> {
  let started = false;
  let result;
  try {
    result = await call.ledger.once(
      { ...call.request, ...call.fingerprints, kind: 'request', name: call.name },
      async ({ sql, db }) => {
        started = true;
        return work({ ...call.request, sql, db, bypassed: false });
      },
      {
        serialize: storage.serialize,
        code: storage.code,
        storeError: storage.storeError,
        ...(call.options.retentionMs === undefined ? {} : { retentionMs: call.options.retentionMs }),
      },
    );
  } catch (error) {
    if (!isStepkeyError(error)) throw error;
    // Fail open only on an outage, and only if the work has not run: it must not run twice.
    if (error.code === 'database_unavailable' && !started && call.options.onLedgerDown === 'open') return { state: 'bypassed' };
    throw refusalOf(error, call.report);
  }
  switch (result.state) {
    case 'executed':
      return result;
    case 'replay':
      instrument.replayed('procedure');
      return result;
    case 'in_progress':
      throw inProgress(result.retryAfterMs);
    case 'mismatch':
      throw mismatch(result.existing, { kind: 'request', name: call.name }, call.noun);
  }
}
