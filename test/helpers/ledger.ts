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
