/** A ledger on the test file's database, with its own clock. */
import { Clock } from '../../src/db/clock.js';
import { Ledger, type LedgerOptions } from '../../src/ledger/ledger.js';
import type { TestDatabase } from './database.js';

export function testLedger(db: TestDatabase, options: Partial<LedgerOptions> = {}): Ledger {
  return new Ledger({ sql: db.sql, clock: new Clock(), ...options });
}

let counter = 0;
/** A key no other test in this process uses. */
export function uniqueKey(prefix = 'key'): string {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}

/** The root a run's (or an enqueued effect's) keys derive from, as its row stored it. */
export async function storedRoot(db: TestDatabase, ref: { scope: string; key: string }): Promise<string> {
  const [row] = await db.sql<{ root: string | null }[]>`
    select root_key as root from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
  if (!row?.root) throw new Error(`no stored root for ${ref.scope}/${ref.key}`);
  return row.root;
}
