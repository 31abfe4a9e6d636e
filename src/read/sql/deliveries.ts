/**
 * Where derived keys went, in one statement: rows under those keys in any
 * scope of the ledger (downstream ledgers), the graphile-worker jobs still
 * waiting under them (pending, retrying, failed — finished jobs are deleted),
 * the inbox rows of consumers that applied them, and the operator actions
 * recorded for the matched keys.
 *
 * Every part is index probes: the ledger through a loose index scan of its
 * scopes and the primary key (keys-across-scopes.ts); graphile-worker's job
 * key is unique and indexed; the inbox is keyed by (consumer, message_key),
 * its consumers found with a loose index scan of that primary key, then one
 * probe per (consumer, key) — no index on message_key is needed. Each probe
 * is a LATERAL subquery with LIMIT 1 (each is unique), which the planner
 * cannot flatten into a join: flattened, it would rather hash-join a scan.
 */
import type { Queryable } from '../../db/connect.js';
import { ledgerColumns, type LedgerRow } from '../../ledger/sql/read.js';
import type { KeyRef } from '../../ledger/types.js';
import { auditColumns, type AuditEntry } from './audit.js';
import { graphileInstalled, jobColumns } from './jobs.js';
import { distinctScopes, distinctValues } from './keys-across-scopes.js';
import { errorCode } from '../../errors/pg-errors.js';

export interface JobInfo {
  id: string;
  task: string;
  key: string | null;
  attempts: number;
  maxAttempts: number;
  status: 'pending' | 'running' | 'retrying' | 'failed';
  lastError: string | null;
  /** Milliseconds since the epoch, like every time stepkey reads. */
  runAt: number;
  lockedBy: string | null;
}

export interface InboxInfo {
  consumer: string;
  messageKey: string;
  processedAt: number;
  expiresAt: number;
}

export interface WhereKeysWent {
  rows: LedgerRow[];
  jobs: JobInfo[];
  inbox: InboxInfo[];
  audit: AuditEntry[];
  nowMs: number;
}

export async function whereKeysWent(q: Queryable, keys: readonly string[], roots: readonly KeyRef[]): Promise<WhereKeysWent> {
  const jobs = (await graphileInstalled(q))
    ? `select found.* from wanted w
        cross join lateral (select ${jobColumns} from graphile_worker.jobs j where j.key = w.key limit 1) found
        order by found.id::bigint`
    : 'select 1 where false';
  const statement = (perScope: boolean) => `with recursive ${perScope ? `${distinctScopes},` : ''}
     ${distinctValues('consumers', 'stepkey.inbox', 'consumer')},
     wanted as (select value as key from json_array_elements_text($1::json)),
     roots as (select * from json_to_recordset($2::json) as r(scope text, key text))
     select
       ${perScope ? `(select coalesce(json_agg(found order by found.scope, found.key), '[]')
          from scopes s cross join wanted w
         cross join lateral (select ${ledgerColumns} from stepkey.key_rows where scope = s.scope and key = w.key limit 1) found
         where s.scope is not null)` : `'[]'::json`} as rows,
       (select coalesce(json_agg(j), '[]') from (${jobs}) j) as jobs,
       (select coalesce(json_agg(found order by found."processedAt"), '[]')
          from consumers c cross join wanted w
         cross join lateral (
           select consumer, message_key as "messageKey", (extract(epoch from processed_at) * 1000)::float8 as "processedAt",
                  (extract(epoch from expires_at) * 1000)::float8 as "expiresAt"
             from stepkey.inbox where consumer = c.consumer and message_key = w.key limit 1) found
         where c.consumer is not null) as inbox,
       ${perScope ? `(select coalesce(json_agg(a order by a.id desc), '[]')
          from roots r cross join lateral (
            select ${auditColumns} from stepkey.audit_log where scope = r.scope and key = r.key order by id desc limit 50) a)` : `'[]'::json`} as audit,
       (extract(epoch from now()) * 1000)::float8 as "nowMs"`;
  const params = [JSON.stringify(keys), JSON.stringify(roots)] as never[];
  try {
    const [row] = await q.unsafe<WhereKeysWent[]>(statement(true), params);
    return row!;
  } catch (error) {
    // Citus (0A000): no recursive CTE over a distributed table without its scope. The ledger's rows
    // are then asked of every shard by key, and each root's audit of its scope's node.
    if (errorCode(error) !== '0A000') throw error;
  }
  const [row] = await q.unsafe<WhereKeysWent[]>(statement(false), params);
  const rows = await q.unsafe<LedgerRow[]>(
    `select ${ledgerColumns} from stepkey.key_rows where key in (select json_array_elements_text($1::json)) order by scope, key`,
    [JSON.stringify(keys)] as never[],
  );
  const audit: AuditEntry[] = [];
  for (const root of roots) {
    audit.push(
      ...(await q.unsafe<AuditEntry[]>(
        `select ${auditColumns} from stepkey.audit_log where scope = $1 and key = $2 order by id desc limit 50`,
        [root.scope, root.key] as never[],
      )),
    );
  }
  return { ...row!, rows, audit: audit.sort((a, b) => b.id - a.id) };
}
