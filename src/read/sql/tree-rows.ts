/**
 * The rows of a key's tree, in one statement: the key's own row (in one
 * scope, or in every scope that holds it) and the rows of its children — a
 * run's steps (stepkey.key_rows: the ledger's rows and the step table's,
 * found through ledger_children_idx and steps_run_idx). A
 * run's row carries its input and its status (run-status.ts).
 *
 * Without a scope, the scopes that hold the key come from a loose index scan
 * of the primary key (keys-across-scopes.ts): one probe per scope, never a
 * table scan; then each scope's tree is read by a statement of its own. The
 * child probe is a LATERAL subquery the planner cannot flatten (OFFSET 0):
 * flattened, it may prefer to hash-join a scan of the ledger.
 */
import type { Queryable } from '../../db/connect.js';
import { systemClock, type Clock } from '../../db/clock.js';
import { ledgerColumns, type LedgerRow } from '../../ledger/sql/read.js';
import { statusCaseSql, type RunStatusName } from '../run-status.js';
import { distinctScopes } from './keys-across-scopes.js';
import { SqlText } from './sql-text.js';
import { errorCode } from '../../errors/pg-errors.js';

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
  if (query.scope !== undefined) return readScopeTree(q, query.scope, query.key, clock);
  // Without a scope the read is done per scope (on Citus each then runs on its scope's node).
  const rows: TreeRow[] = [];
  for (const scope of await scopesHolding(q, query.key)) rows.push(...(await readScopeTree(q, scope, query.key, clock)));
  return rows;
}

/**
 * The scopes whose ledger holds `key`, in order: a loose index scan of the
 * primary key (one probe per scope). Citus refuses a recursive CTE without
 * a filter on the distribution column (0A000): there each shard is asked.
 */
async function scopesHolding(q: Queryable, key: string): Promise<string[]> {
  try {
    const rows = await q.unsafe<{ scope: string }[]>(
      `with recursive ${distinctScopes}
       select s.scope from scopes s
        where s.scope is not null and exists (select 1 from stepkey.key_rows l where l.scope = s.scope and l.key = $1)
        order by s.scope`,
      [key],
    );
    return rows.map((row) => row.scope);
  } catch (error) {
    if (errorCode(error) !== '0A000') throw error;
    const rows = await q<{ scope: string }[]>`select distinct scope from stepkey.key_rows where key = ${key} order by scope`;
    return rows.map((row) => row.scope);
  }
}

/** One scope's tree of `key`: a statement that names the scope in each part. */
async function readScopeTree(q: Queryable, scope: string, key: string, clock: Clock): Promise<TreeRow[]> {
  const text = new SqlText(clock);
  const scopeParam = text.param(scope);
  const keyParam = text.param(key);
  const rows = await q.unsafe<Flat[]>(
    `with matched as (
       select l.* from stepkey.key_rows l where l.scope = ${scopeParam}::text and l.key = ${keyParam}::text limit 1
     ),
     tree as (
       select m.scope as match_scope, m.key as match_key, 0 as depth, m.* from matched m
       union all
       select m.scope, m.key, 1, c.*
         from matched m
        cross join lateral (select * from stepkey.key_rows c where c.scope = ${scopeParam}::text and c.scope = m.scope and c.parent_key = m.key offset 0) c
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
