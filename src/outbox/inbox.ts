/**
 * Consuming an effect: the graphile-worker task behind each effect.
 *
 *   BEGIN
 *     INSERT inbox row (consumer, message key)   — already there: done, skip
 *     handler(payload, { sql, db, key })         — the effect's own work
 *   COMMIT                                       — then the job is marked done
 *
 * A crash anywhere before COMMIT leaves nothing and the job runs again; after
 * it, the redelivered job finds the inbox row and is acknowledged without
 * running. A handler error with retryable === false fails the job for good
 * (kept in graphile-worker's table with its error, retried only by hand); any
 * other error is retried with graphile-worker's backoff.
 */
import type { Task } from 'graphile-worker';
import { drizzleOn, type Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { Transaction } from '../db/transaction.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { faultPoint } from '../faults/fault-points.js';
import { isNonRetryable } from '../ledger/outcome.js';
import { summarise } from '../workflow/values.js';
import type { Effect } from './effect.js';
import { readEnvelope } from './message.js';
import { claimInboxStatement } from './sql/inbox.js';
import { failJobForGood } from './sql/jobs.js';
import { serializeError } from '../ledger/outcome.js';
import type { Logger } from '../log/logger.js';
import { inSpan } from '../telemetry/tracing.js';
import { deliveryEnding, deliverySpan } from '../telemetry/spans.js';

export interface ConsumeDeps {
  sql: Sql;
  clock: Clock;
  /** How long inbox rows are kept; must outlive the jobs' retry horizon. */
  inboxRetentionMs: number;
  /** Where deliveries are logged. */
  log?: Logger;
}

export type ConsumeResult = 'applied' | 'duplicate';

/** Applies one delivery of `effect` through the inbox. */
export async function consume(
  deps: ConsumeDeps,
  effect: Effect,
  rawPayload: unknown,
  delivery: { attempt: number; signal: AbortSignal },
): Promise<ConsumeResult> {
  const envelope = readEnvelope(rawPayload);
  if (!envelope) {
    throw new StepkeyError('invalid_input', `Job for effect '${effect.name}' has no stepkey envelope.`, { retryable: false });
  }
  const parsed = effect.payload.safeParse(envelope.p);
  if (!parsed.success) {
    throw new StepkeyError('invalid_input', `Job for effect '${effect.name}' has an invalid payload: ${summarise(parsed.error)}.`, {
      retryable: false,
    });
  }
  const transaction = await Transaction.begin(deps.sql).catch((error: unknown) => {
    throw translateDatabaseError(error, `consuming effect '${effect.name}'`);
  });
  try {
    const [fresh] = await claimInboxStatement(transaction.sql, deps.clock, effect.consumer, envelope.k, deps.inboxRetentionMs);
    if (!fresh) {
      transaction.abandon();
      return 'duplicate';
    }
    await effect.handler(parsed.data, {
      key: envelope.k,
      scope: envelope.s,
      sql: transaction.sql,
      db: drizzleOn(transaction.sql),
      attempt: delivery.attempt,
      signal: delivery.signal,
    });
  } catch (error) {
    await transaction.rollback();
    throw error;
  }
  faultPoint('outbox.after-apply', effect.name);
  await transaction.commit();
  return 'applied';
}

/** The graphile-worker task for `effect`. */
export function effectTask(deps: ConsumeDeps, effect: Effect): Task {
  return async (payload, helpers) => {
    const job = { event: 'effect.delivery', effect: effect.name, job: helpers.job.id, attempt: helpers.job.attempts };
    try {
      const result = await inSpan(deliverySpanOf(effect, payload, helpers.job), () => consume(deps, effect, payload, { attempt: helpers.job.attempts, signal: helpers.abortSignal }), deliveryEnding);
      deps.log?.info({ ...job, key: readEnvelope(payload)?.k, result }, result === 'applied' ? `delivered effect '${effect.name}'` : `effect '${effect.name}' was delivered before; acknowledged`);
    } catch (error) {
      const final = isNonRetryable(error);
      deps.log?.[final ? 'error' : 'warn']({ ...job, final, error: serializeError(error) }, `delivering effect '${effect.name}' failed${final ? ' for good' : '; it is retried'}`);
      if (final) await failJobForGood(deps.sql, helpers.job.id);
      throw error;
    }
  };
}

/** A delivery's span: a child of the context its envelope carries (where the effect was enqueued). */
function deliverySpanOf(effect: Effect, payload: unknown, job: { id: string; attempts: number }) {
  return () => {
    const envelope = readEnvelope(payload);
    return deliverySpan({ scope: envelope?.s, key: envelope?.k, effect: effect.name, attempt: job.attempts, job: job.id, continues: envelope?.t });
  };
}
