/**
 * Finding keys in every scope of the ledger without an index on `key`: the
 * hot path must not pay for inspection.
 *
 * The distinct scopes come from a loose index scan — a recursive CTE that
 * jumps through the (scope, key) primary key, one index probe per scope,
 * however many keys each scope holds. The readers (tree-rows.ts,
 * deliveries.ts) then look each (scope, key) pair up through the primary
 * key. Cost: (scopes × keys) index probes, never a scan of the table.
 */
import type { Queryable } from '../../db/connect.js';

/**
 * A recursive CTE `name(column)` listing the distinct values of an index's
 * leading column in order: one index probe per value (a loose index scan).
 */
export function distinctValues(name: string, table: string, column: string): string {
  return `
  ${name}(${column}) as (
    (select ${column} from ${table} order by ${column} limit 1)
    union all
    select (select t.${column} from ${table} t where t.${column} > d.${column} order by t.${column} limit 1)
      from ${name} d
     where d.${column} is not null
  )`;
}

/** The recursive CTE `scopes(scope)`: every distinct scope of the ledger, in order. */
export const distinctScopes = distinctValues('scopes', 'stepkey.ledger', 'scope');

/** How many distinct scopes the ledger holds (for messages). */
export async function countScopes(q: Queryable): Promise<number> {
  const rows = await q.unsafe<{ n: number }[]>(
    `with recursive ${distinctScopes} select count(*)::int as n from scopes where scope is not null`,
  );
  return rows[0]?.n ?? 0;
}
