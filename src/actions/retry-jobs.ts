/**
 * Retry: outbox jobs that failed for good are due again now, with their
 * attempts reset and their max attempts restored (outbox/sql/jobs.ts); a
 * job running right now is left alone. One audit row per job asked for,
 * committed with the retry.
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { retryJobs } from '../outbox/sql/jobs.js';
import { assertActionBy, insertJobAuditStatement, type ActionBy } from './sql/audit.js';

export interface RetryResult {
  retried: string[];
  /** Unknown, or locked by a running worker. */
  missed: string[];
}

const MAX_JOBS = 1_000;

export async function retryJobsAction(sql: Sql, clock: Clock, ids: readonly string[], by: ActionBy): Promise<RetryResult> {
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > MAX_JOBS || ids.some((id) => typeof id !== 'string' || !/^[1-9]\d{0,18}$/.test(id))) {
    throw new StepkeyError('invalid_input', `Job ids are 1 to ${MAX_JOBS} positive integers, such as '12'.`);
  }
  assertActionBy(by);
  const wanted = [...new Set(ids)];
  try {
    return await sql.begin(async (tx) => {
      const retried = await retryJobs(tx, wanted);
      await insertJobAuditStatement(tx, clock, by, wanted, retried);
      return { retried, missed: wanted.filter((id) => !retried.includes(id)) };
    });
  } catch (error) {
    throw translateDatabaseError(error, 'retrying jobs');
  }
}
