/**
 * The rows of a key's tree, in one statement: the key's own row (in one
 * scope, or in every scope that holds it) and the rows of its children — a
 * run's steps (stepkey.key_rows: the ledger's rows and the step table's,
 * found through ledger_children_idx and steps_run_idx). A
 * run's row carries its input and its status (run-status.ts).
 *
 * Without a scope, the scopes come from a loose index scan of the primary
 * key (keys-across-scopes.ts): one probe per scope, never a table scan. The
 * probes are LATERAL subqueries the planner cannot flatten (LIMIT, OFFSET
 * 0): flattened, it may prefer to hash-join a scan of the ledger.
 */
import type { Queryable } from '../../db/connect.js';
import { systemClock, type Clock } from '../../db/clock.js';
import { ledgerColumns, type LedgerRow } from '../../ledger/sql/read.js';
import { statusCaseSql, type RunStatusName } from '../run-status.js';
import { distinctScopes } from './keys-across-scopes.js';
import { SqlText } from './sql-text.js';

export interface TreeRow {
  /** The matched key this row belongs to. */
  matchScope: string;
  matchKey: string;
  /** 0: the matched key's row; 1: one of its children. */
  depth: 0 | 1;
  row: LedgerRow;
  runStatus: RunStatusName | null;
  input: string | null;
}

type Flat = LedgerRow & { matchScope: string; matchKey: string; depth: 0 | 1; runStatus: RunStatusName | null; input: string | null };

export async function readTreeRows(q: Queryable, query: { key: string; scope?: string | undefined }, clock: Clock = systemClock): Promise<TreeRow[]> {
  const text = new SqlText(clock);
  const key = text.param(query.key);
  const found =
    query.scope !== undefined
      ? `found as (select ${text.param(query.scope)}::text as scope, ${key}::text as key)`
      : `found as (select s.scope, ${key}::text as key from scopes s where s.scope is not null)`;
  const rows = await q.unsafe<Flat[]>(
    `with recursive ${distinctScopes}, ${found},
     matched as (
       select l.* from found f
        cross join lateral (select * from stepkey.key_rows l where l.scope = f.scope and l.key = f.key limit 1) l
     ),
     tree as (
       select m.scope as match_scope, m.key as match_key, 0 as depth, m.* from matched m
       union all
       select m.scope, m.key, 1, c.*
         from matched m
        cross join lateral (select * from stepkey.key_rows c where c.scope = m.scope and c.parent_key = m.key offset 0) c
     )
     select match_scope as "matchScope", match_key as "matchKey", depth, ${ledgerColumns},
            case when l.kind = 'run' then l.input end as input,
            case when l.kind = 'run' and l.depth = 0 then ${statusCaseSql(text.now())} end as "runStatus"
       from tree l
      order by match_scope, match_key, depth, created_at, key`,
    text.values as never[],
  );
  return rows.map(({ matchScope, matchKey, depth, runStatus, input, ...row }) => ({ matchScope, matchKey, depth, runStatus, input, row }));
}
