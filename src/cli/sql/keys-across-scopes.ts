/**
 * Finding keys in every scope of the ledger without an index on `key`: the
 * hot path must not pay for inspection.
 *
 * The distinct scopes come from a loose index scan — a recursive CTE that
 * jumps through the (scope, key) primary key, one index probe per scope,
 * however many keys each scope holds. Each (scope, key) pair is then looked up
 * through the primary key. Cost: (scopes × keys) index probes, never a scan
 * of the table.
 */
import type { Queryable } from '../../db/connect.js';
import { ledgerColumns, type LedgerRow } from '../../ledger/sql/read.js';

/** The recursive CTE `scopes(scope)`: every distinct scope of the ledger, in order. */
const distinctScopes = `
  scopes(scope) as (
    (select scope from stepkey.ledger order by scope limit 1)
    union all
    select (select l.scope from stepkey.ledger l where l.scope > s.scope order by l.scope limit 1)
      from scopes s
     where s.scope is not null
  )`;

/** Every ledger row, in any scope, whose key is one of `keys`. */
export async function rowsWithKeys(q: Queryable, keys: readonly string[]): Promise<LedgerRow[]> {
  if (keys.length === 0) return [];
  return q.unsafe<LedgerRow[]>(
    `with recursive ${distinctScopes}
     select found.*
       from scopes s
      cross join (select value as key from json_array_elements_text($1::json)) as wanted
      cross join lateral (
        select ${ledgerColumns} from stepkey.ledger
         where scope = s.scope and key = wanted.key
      ) found
      where s.scope is not null
      order by found.scope, found.key`,
    [JSON.stringify(keys)],
  );
}

/** How many distinct scopes the ledger holds (for messages). */
export async function countScopes(q: Queryable): Promise<number> {
  const rows = await q.unsafe<{ n: number }[]>(
    `with recursive ${distinctScopes} select count(*)::int as n from scopes where scope is not null`,
  );
  return rows[0]?.n ?? 0;
}
