/**
 * A queue's statements keep using their indexes as its tables grow. A
 * connection caches the plans of stepkey's statements (a dispatch's generic
 * plan, a PL/pgSQL function's) with the tables' sizes of the moment they are
 * made; made while the ledger was a few rows, a plan could read it whole at
 * every dispatch once it holds thousands. So those transactions plan without
 * sequential scans (db/transaction.ts, WITHOUT_SEQ_SCANS). Seen from the
 * ledger's counters: the rows sequential scans read, counted by each
 * backend and reported when it exits.
 */
import { describe, expect, it } from 'vitest';
import { defineQueue } from '../../src/flow/define-queue.js';
import { connect } from '../../src/db/connect.js';
import type { KeyRef } from '../../src/ledger/types.js';
import { useTestDatabase } from '../helpers/database.js';
import { Clock } from '../../src/db/clock.js';
import { Engine } from '../../src/engine/engine.js';
import { gatedOneStep, gates, slotsHeld } from '../helpers/flow.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const { gate, openAll } = gates();
const { workflow: held, executions } = gatedOneStep('flow-plans-held', gate);

/** Grown in between: more rows than all the runs of the test, many times over. */
const GROWN = 20_000;

/** The rows sequential scans of `table` have read so far, and all its scans, as reported by backends that exited or flushed. */
async function scansOf(table: string): Promise<{ seqRows: number; scans: number }> {
  const [row] = await db().sql<{ seqRows: number; scans: number }[]>`
    select coalesce(seq_tup_read, 0)::float8 as "seqRows", (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::float8 as scans
      from pg_stat_user_tables where schemaname = 'stepkey' and relname = ${table}`;
  return row!;
}

describe("a queue's statements", () => {
  it('do not read the ledger whole once it has grown, however small it was when their plans were made', async () => {
    const queue = defineQueue({ name: uniqueKey('flow-plans'), concurrency: 2 });
    const application = uniqueKey('flow-plans');
    const pool = connect(db().url, { max: 4, applicationName: application });
    const e = new Engine({ database: pool, workflows: [held], queues: [queue], clock: new Clock(), leaseMs: LONG_LEASE_MS, sweepIntervalMs: 3_600_000, onError: () => {} });
    const refs = (prefix: string, n: number): KeyRef[] => Array.from({ length: n }, (_, i) => ({ scope: 'plans', key: uniqueKey(`${prefix}-${i}`) }));
    const run = async (line: KeyRef[]) => {
      const handles = [];
      for (const ref of line) handles.push(await e.enqueue(held, ref, { id: ref.key }, { queue }));
      // Two take their slots at once; each end dispatches the next (a dispatch's plan, made here).
      expect(handles.filter((handle) => handle.queued)).toHaveLength(line.length - 2);
      for (const ref of line) gate(ref.key).open();
      for (const handle of handles) await handle.result();
    };
    try {
      // The queue's plans are made on this connection pool while the ledger holds a few rows.
      await run(refs('small', 6));
      await db().sql`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, attempts, created_at, updated_at, outcome, outcome_ok, completed_at)
        select 'plans-grown', 'k' || i, 'request', null, 'f', 'completed', 1, now(), now(), '{}', true, now()
          from generate_series(1, ${GROWN}) as i`;
      await run(refs('grown', 6));
    } finally {
      openAll();
      await e.shutdown({ timeoutMs: 5_000 });
      await pool.close();
    }
    // Its backends have exited (each reports its counters as it exits).
    await expect
      .poll(async () => (await db().sql`select 1 from pg_stat_activity where application_name = ${application}`).length, { timeout: PATIENCE_MS })
      .toBe(0);
    // And their counters have all arrived: the ledger's scans no longer change.
    let last = -1;
    await expect
      .poll(async () => {
        const { scans } = await scansOf('ledger');
        const settled = scans === last;
        last = scans;
        return settled;
      }, { timeout: PATIENCE_MS, interval: 250 })
      .toBe(true);
    // One sequential scan of the grown ledger would read all of it.
    expect((await scansOf('ledger')).seqRows).toBeLessThan(GROWN);
    expect([...executions.keys()].filter((key) => key.includes('grown'))).toHaveLength(6);
    expect(await slotsHeld(db().sql, queue.name)).toEqual({ held: 0, entries: 0 });
  });
});
