/**
 * Writing the audit log. Each action writes its row in the transaction of
 * the change it records: an action is recorded if and only if it was
 * carried out (or refused, with applied = false).
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { sqlNow } from '../../db/clock.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { assertStorableText } from '../../keys/validate.js';

export interface ActionBy {
  /** Who: a person's name, `cli:user@host`, `dashboard@127.0.0.1`. */
  actor: string;
  /** Through what. */
  source: 'dashboard' | 'cli' | 'api';
}

export type AuditAction = 'cancel' | 'resume' | 'retry_job' | 'resolve' | 'rerun';

const sources = new Set<string>(['dashboard', 'cli', 'api']);
const MAX_ACTOR = 200;

/** Who acts, checked before the action changes anything. */
export function assertActionBy(by: ActionBy): void {
  if (!by || typeof by.actor !== 'string' || by.actor.trim() === '' || by.actor.length > MAX_ACTOR) {
    throw new StepkeyError('invalid_input', `An action's actor is 1 to ${MAX_ACTOR} characters naming who acts, got ${JSON.stringify(by?.actor)}.`);
  }
  assertStorableText(by.actor, "The action's actor");
  if (!sources.has(by.source)) throw new StepkeyError('invalid_input', `An action's source is dashboard, cli or api, not ${JSON.stringify(by.source)}.`);
}

export interface AuditRecord {
  scope: string;
  action: AuditAction;
  key: string | null;
  jobId?: string | null;
  applied: boolean;
  detail?: Record<string, unknown>;
}

export function insertAuditStatement(q: Queryable, clock: Clock, by: ActionBy, record: AuditRecord) {
  return q`
    insert into stepkey.audit_log (scope, at, action, actor, source, key, job_id, applied, detail)
    values (${record.scope}, ${sqlNow(q, clock)}, ${record.action}, ${by.actor}, ${by.source}, ${record.key},
            ${record.jobId ?? null}, ${record.applied}, ${record.detail ? JSON.stringify(record.detail) : null})`;
}

/** One audit row per job id asked for: its scope and message key from the job, applied when it was retried. */
export function insertJobAuditStatement(q: Queryable, clock: Clock, by: ActionBy, ids: readonly string[], retried: readonly string[]) {
  return q`
    insert into stepkey.audit_log (scope, at, action, actor, source, key, job_id, applied)
    select coalesce(j.payload->>'s', ''), ${sqlNow(q, clock)}, 'retry_job', ${by.actor}, ${by.source}, j.key, wanted.id,
           wanted.id in (select value from json_array_elements_text(${JSON.stringify(retried)}::json))
      from json_array_elements_text(${JSON.stringify(ids)}::json) as wanted(id)
      left join graphile_worker._private_jobs j on j.id = wanted.id::bigint`;
}
