/** Helpers of the step-limit tests: what a limit holds, and a run's ledger row. */
import type { Sql } from '../../src/db/connect.js';
import type { KeyRef } from '../../src/ledger/types.js';

/** Slots held per the partitions' counters and per the slot rows (they must agree), and tokens granted. */
export async function limitHeld(sql: Sql, limit: string): Promise<{ held: number; slots: number; granted: number }> {
  const [row] = await sql<{ held: number; slots: number; granted: number }[]>`
    select coalesce((select sum(held) from stepkey.limit_partitions where limit_name = ${limit}), 0)::int as held,
           (select count(*) from stepkey.limit_slots where limit_name = ${limit})::int as slots,
           coalesce((select sum(granted) from stepkey.limit_partitions where limit_name = ${limit}), 0)::int as granted`;
  return row!;
}

export async function runRow(sql: Sql, ref: KeyRef) {
  const [row] = await sql<
    { status: string; wait_kind: string | null; wait_for: string | null; lease_token: string | null; locked_until: Date | null; wake_in_ms: number | null; attempts: number }[]
  >`
    select status, wait_kind, wait_for, lease_token::text as lease_token, locked_until, attempts,
           (extract(epoch from wake_at - now()) * 1000)::float8 as wake_in_ms
      from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
  return row;
}
