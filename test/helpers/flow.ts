/** Helpers of the flow-control tests: gates a run waits at (and a one-step workflow that waits at them), a table of recorded step intervals, waiting for runs to end, and the queue's lock. */
import { z } from 'zod';
import type { Sql } from '../../src/db/connect.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { LONG_LEASE_MS, PATIENCE_MS } from './patience.js';

export async function createIntervals(sql: Sql): Promise<void> {
  await sql`create table if not exists public.flow_intervals (
              id bigint generated always as identity primary key,
              run text not null, tenant text not null,
              started_at timestamptz not null default clock_timestamp(),
              ended_at timestamptz)`;
}

/** Records a start; returns its id for `recordEnd`. */
export async function recordStart(sql: Sql, run: string, tenant: string): Promise<number> {
  const [row] = await sql<{ id: number }[]>`
    insert into public.flow_intervals (run, tenant) values (${run}, ${tenant}) returning id::int as id`;
  return row!.id;
}

export async function recordEnd(sql: Sql, id: number): Promise<void> {
  await sql`update public.flow_intervals set ended_at = clock_timestamp() where id = ${id}`;
}

export interface Interval {
  run: string;
  tenant: string;
  start: number;
  end: number;
}

export async function readIntervals(sql: Sql, prefix: string): Promise<Interval[]> {
  const rows = await sql<{ run: string; tenant: string; start: number; end: number | null }[]>`
    select run, tenant, (extract(epoch from started_at) * 1e6)::float8 as start,
           (extract(epoch from ended_at) * 1e6)::float8 as end
      from public.flow_intervals where run like ${prefix + '%'} order by id`;
  return rows.map((row) => ({ ...row, end: row.end ?? Number.POSITIVE_INFINITY }));
}

/**
 * The most runs open at one instant, overall and per tenant (an end and a
 * start at one instant do not overlap). A run counts once however many of
 * its executions overlap: a run taken over from a stalled process may still
 * be finishing its call there, in the one slot the run holds.
 */
export function maxOverlap(intervals: readonly Interval[]): { overall: number; perTenant: number } {
  const events = intervals.flatMap((i) => [
    { at: i.start, delta: 1, run: i.run, tenant: i.tenant },
    { at: i.end, delta: -1, run: i.run, tenant: i.tenant },
  ]);
  events.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let overall = 0;
  let maxOverall = 0;
  let maxPerTenant = 0;
  const executions = new Map<string, number>();
  const open = new Map<string, number>();
  for (const event of events) {
    const before = executions.get(event.run) ?? 0;
    executions.set(event.run, before + event.delta);
    const change = before === 0 && event.delta === 1 ? 1 : before === 1 && event.delta === -1 ? -1 : 0;
    if (change === 0) continue;
    overall += change;
    const n = (open.get(event.tenant) ?? 0) + change;
    open.set(event.tenant, n);
    maxOverall = Math.max(maxOverall, overall);
    maxPerTenant = Math.max(maxPerTenant, n);
  }
  return { overall: maxOverall, perTenant: maxPerTenant };
}

/** Waits until no run whose key starts with `prefix` is still queued, waiting or in progress. */
export async function waitForRunsToEnd(sql: Sql, prefix: string, timeoutMs = PATIENCE_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [row] = await sql<{ open: number }[]>`
      select count(*)::int as open from stepkey.ledger
       where kind = 'run' and key like ${prefix + '%'} and status in ('in_progress', 'waiting')`;
    if (row!.open === 0) return;
    if (Date.now() > deadline) {
      const open = await sql<{ key: string; status: string; wait_kind: string | null; attempts: number; lease_left_ms: number | null }[]>`
        select key, status, wait_kind, attempts, (extract(epoch from locked_until - now()) * 1000)::int as lease_left_ms
          from stepkey.ledger
         where kind = 'run' and key like ${prefix + '%'} and status in ('in_progress', 'waiting') limit 5`;
      throw new Error(`${row!.open} runs of '${prefix}' still open after ${timeoutMs} ms: ${JSON.stringify(open)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export async function slotsHeld(sql: Sql, queue: string): Promise<{ held: number; entries: number }> {
  const [row] = await sql<{ held: number; entries: number }[]>`
    select count(*) filter (where holding)::int as held, count(*)::int as entries
      from stepkey.queue_entries where queue = ${queue}`;
  return row!;
}

/**
 * Gates a test opens: a run's step waits at `gate(id).opened` until the test
 * calls `gate(id).open()`; `openAll()` (after each test) lets every waiter go.
 */
export function gates() {
  const entries = new Map<string, { open: () => void; opened: Promise<void> }>();
  const gate = (id: string) => {
    let entry = entries.get(id);
    if (!entry) {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      entry = { open, opened };
      entries.set(id, entry);
    }
    return entry;
  };
  const openAll = () => {
    for (const entry of entries.values()) entry.open();
  };
  return { gate, openAll, clear: () => entries.clear() };
}

/** Holds the queue's lock in a transaction of its own (as an enqueue or a dispatch in flight would) until the returned function is called. */
export async function holdQueueLock(sql: Sql, queue: string): Promise<() => Promise<void>> {
  const holder = await sql.reserve();
  await holder`begin`;
  await holder`select pg_advisory_xact_lock(hashtextextended('stepkey.queue' || chr(30) || ${queue}, 0))`;
  return async () => {
    try {
      await holder`commit`;
    } finally {
      holder.release();
    }
  };
}

/** Transactions waiting for an advisory lock now, in `sql`'s database. */
export async function lockWaiters(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_locks
     where locktype = 'advisory' and not granted and database = (select oid from pg_database where datname = current_database())`;
  return row!.n;
}

/** The advisory locks held or waited for now in `sql`'s database, by mode (a dispatch takes its queue's lock exclusively, a look waits for it shared). */
export async function advisoryLocks(sql: Sql, which: 'waiting' | 'all' = 'waiting'): Promise<string[]> {
  const rows = await sql<{ mode: string }[]>`
    select mode from pg_locks
     where locktype = 'advisory' and (${which} = 'all' or not granted)
       and database = (select oid from pg_database where datname = current_database())
     order by mode`;
  return rows.map((row) => row.mode);
}

/**
 * A one-step workflow named `name` whose step counts its executions by input id and waits at that id's
 * gate (`gate`: from gates()); `running()` is how many wait at their gates now, `most()` the most that
 * did at once since `resetMost()`.
 */
export function gatedOneStep<const Name extends string>(name: Name, gate: ReturnType<typeof gates>['gate']) {
  const executions = new Map<string, number>();
  let running = 0;
  let most = 0;
  const workflow = defineWorkflow({
    name,
    version: 1,
    input: z.object({ id: z.string() }),
    steps: { work: step('work.v1', { timeoutMs: LONG_LEASE_MS, retry: { attempts: 1 } }) },
    async run({ input, steps }) {
      await steps.work.call(async () => {
        executions.set(input.id, (executions.get(input.id) ?? 0) + 1);
        running += 1;
        most = Math.max(most, running);
        try {
          await gate(input.id).opened;
        } finally {
          running -= 1;
        }
      });
      return { id: input.id };
    },
  });
  return {
    workflow,
    executions,
    running: () => running,
    most: () => most,
    resetMost: () => {
      most = running;
    },
  };
}
