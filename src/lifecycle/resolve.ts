/**
 * An operator's resolution of a run that needs review.
 *
 * Guarantee: applies only to a run parked for review at exactly this step
 * and not resolved yet (its wake time still unset), in one statement: the
 * unknown attempts of the step are marked resolved — with the operator's
 * output, or to be called again — and the run is made due (`wake_at =
 * now()`), so that a sweeper continues it. The run's row lock serialises two
 * operators: the second finds it resolved and changes nothing. The step's
 * own record is not written here: the run writes it, under its lease, when
 * it reaches the step again.
 */
import type { Queryable } from '../db/connect.js';
import { type Clock, sqlNow } from '../db/clock.js';
import type { KeyRef } from '../ledger/types.js';

export async function resolveReviewStatement(
  q: Queryable,
  clock: Clock,
  run: KeyRef,
  step: string,
  resolution: { resolution: 'resolved'; output: string } | { resolution: 'retried' },
): Promise<{ due: number; resolved: number }> {
  const now = sqlNow(q, clock);
  const output = resolution.resolution === 'resolved' ? resolution.output : null;
  const [row] = await q<{ due: number; resolved: number }[]>`
    with due as (
      update stepkey.ledger
         set wake_at = ${now}, updated_at = ${now}
       where scope = ${run.scope} and key = ${run.key} and kind = 'run'
         and status = 'waiting' and wait_kind = 'review' and wait_step = ${step} and wake_at is null
         and exists (select 1 from stepkey.step_attempts
                      where scope = ${run.scope} and run_key = ${run.key} and step = ${step}
                        and resolution is null and (outcome is null or outcome = 'unknown'))
      returning 1
    ), resolved as (
      update stepkey.step_attempts
         set resolution = ${resolution.resolution}, resolved_output = ${output}::text, resolved_at = ${now}
       where scope = ${run.scope} and run_key = ${run.key} and step = ${step}
         and resolution is null and (outcome is null or outcome = 'unknown')
         and exists (select 1 from due)
      returning 1
    )
    select (select count(*) from due)::int as due, (select count(*) from resolved)::int as resolved`;
  return row ?? { due: 0, resolved: 0 };
}
