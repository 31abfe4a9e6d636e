/**
 * Writing the audit log. Each action writes its row in the transaction of
 * the change it records: an action is recorded if and only if it was
 * carried out (or refused, with applied = false).
 */
import type { Queryable } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { sqlNow } from '../../db/clock.js';

export interface ActionBy {
  /** Who: a person's name, `cli:user@host`, `dashboard@127.0.0.1`. */
  actor: string;
  /** Through what. */
  source: 'dashboard' | 'cli' | 'api';
}

export interface AuditRecord {
  scope: string;
  action: 'cancel' | 'resume' | 'retry_job';
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
