/**
 * Reading the audit log: the actions operators took (actions/), newest
 * first — for one key (audit_log_key_idx) or across the database
 * (audit_log_at_idx).
 */
import type { Queryable } from '../../db/connect.js';

export interface AuditEntry {
  id: number;
  scope: string;
  /** Milliseconds since the epoch. */
  at: number;
  action: 'cancel' | 'resume' | 'retry_job' | 'resolve' | 'rerun';
  actor: string;
  source: string;
  key: string | null;
  jobId: string | null;
  applied: boolean;
  /** JSON text: the reason given, the status before; a resolve's step and answer, a rerun's step and new key. */
  detail: string | null;
}

export const auditColumns = `
  id::float8 as id, scope, (extract(epoch from at) * 1000)::float8 as at, action, actor, source, key,
  job_id as "jobId", applied, detail`;

export function recentAudit(q: Queryable, limit = 50): Promise<AuditEntry[]> {
  return q.unsafe<AuditEntry[]>(`select ${auditColumns} from stepkey.audit_log order by at desc limit $1`, [limit]);
}
