/**
 * Enqueueing an effect outside a workflow, inside any application
 * transaction, under an explicit scope and key. The ledger row (kind 'effect')
 * and the job commit with the caller's transaction; the same scope and key
 * again enqueue nothing (the same payload) or fail as a mismatch (another
 * payload). The job key is derived like a step's, from a root stored with
 * the row (scope, key and an identity minted when it is first enqueued), so a
 * key reused after its retention enqueues a message the consumers have not
 * seen.
 */
import type { Queryable, Sql } from '../db/connect.js';
import { type Clock, systemClock } from '../db/clock.js';
import { inTransaction, type TxSql } from '../db/transaction.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { childKey, newRootKey, storedRootKey } from '../keys/derive.js';
import { legacyPurposeFingerprint, purposeFingerprint } from '../keys/fingerprint.js';
import { claimKey } from '../ledger/claim.js';
import { DEFAULT_RETENTION_MS } from '../ledger/ledger.js';
import { insertCompletedStatement } from '../ledger/sql/finish.js';
import type { KeyRef } from '../ledger/types.js';
import type { z } from 'zod';
import type { Effect } from './effect.js';
import { envelopeText } from './message.js';
import { addJobStatement } from './sql/add-job.js';
import { inSpan } from '../telemetry/tracing.js';
import { enqueueSpan } from '../telemetry/spans.js';

export interface EnqueueResult {
  /** The message key: the job key and the consumer's dedupe key. */
  key: string;
  /** false when this scope and key had already enqueued it. */
  enqueued: boolean;
}

export interface EnqueueOptions extends KeyRef {
  clock?: Clock;
  retentionMs?: number;
}

/**
 * `q` is the caller's open transaction (the job commits with it): stepkey's
 * TxSql or postgres.js's `sql.begin` — or a pool, for a transaction of its own.
 * Guarantee: the ledger row and the job commit together or not at all. So a
 * reserved connection (`sql.reserve()`) is refused: stepkey cannot tell whether
 * it is inside a transaction, and outside one the row would commit before the
 * job is added — a crash in between would lose the effect for good.
 */
export async function enqueueEffect<Payload extends z.ZodType>(
  q: Queryable,
  effect: Effect<Payload>,
  payload: z.input<Payload>,
  options: EnqueueOptions,
): Promise<EnqueueResult> {
  const isPool = typeof (q as Partial<Sql>).begin === 'function';
  // Transactions (stepkey's TxSql, postgres.js's sql.begin) have savepoint(); reserved connections have not.
  if (!isPool && typeof (q as Partial<TxSql>).savepoint !== 'function') {
    throw new StepkeyError(
      'invalid_options',
      `enqueueEffect('${effect.name}') needs a transaction (stepkey's, or postgres.js's sql.begin) or a pool, ` +
        'and was given a connection outside either (a reserved connection?): the ledger row and the job would not ' +
        'commit together. Call it inside a transaction, or pass the pool. Nothing was enqueued.',
    );
  }
  const root = newRootKey(options.scope, options.key);
  const key = childKey(root, effect.name);
  const envelope = envelopeText(effect, key, options.scope, payload);
  const validated: unknown = JSON.parse(envelope).p;
  const clock = options.clock ?? systemClock;
  const request = {
    scope: options.scope,
    key: options.key,
    kind: 'effect' as const,
    name: effect.name,
    rootKey: root,
    fingerprint: purposeFingerprint(effect.name, validated),
    legacyFingerprint: () => legacyPurposeFingerprint(effect.name, validated),
  };
  const work = async (tx: Queryable): Promise<EnqueueResult> => {
    for (let round = 0; round < 3; round += 1) {
      const claim = await claimKey(tx, clock, request, { leaseMs: 30_000, mode: 'lock' });
      switch (claim.state) {
        case 'vacant': {
          // The ledger row first: if the key was completed just as this claim began, nothing is
          // inserted — and no job added — and the key is read again (the caller's transaction
          // is not aborted by a unique violation).
          const [written] = await insertCompletedStatement(
            tx,
            clock,
            request,
            { ok: true, body: JSON.stringify({ key }) },
            options.retentionMs ?? DEFAULT_RETENTION_MS,
            { skipIfPresent: true },
          );
          if (!written) continue;
          await addJobStatement(tx, effect, key, envelope);
          return { key, enqueued: true };
        }
        case 'replay': {
          // The message the first enqueue sent, under the root it stored.
          const stored = (JSON.parse(claim.outcome.body) as { key?: unknown }).key;
          return {
            key: typeof stored === 'string' ? stored : childKey(storedRootKey(options.scope, options.key, claim.rootKey), effect.name),
            enqueued: false,
          };
        }
        case 'mismatch':
          throw new StepkeyError('mismatch', `Key '${options.key}' already enqueued effect '${effect.name}' with another payload.`);
        default:
          throw new StepkeyError('in_progress', `Key '${options.key}' is being used by another transaction right now.`);
      }
    }
    throw new StepkeyError('in_progress', `Key '${options.key}' kept changing while it was being enqueued.`);
  };
  const span = () => enqueueSpan({ scope: options.scope, key, effect: effect.name });
  return inSpan(span, () => (isPool ? inTransaction(q as Sql, work) : work(q)), (result) => ({ attributes: { 'stepkey.enqueued': result.enqueued } }));
}
