/**
 * The read models on 200 000 runs of 4 steps each (10⁶ rows in the ledger and
 * the step table):
 * every filter of the runs listing is served by the index docs/performance.md names
 * (checked with EXPLAIN), never a scan of the ledger, and a page reads
 * fewer than BLOCKS buffer pages (a scan of the ledger reads tens of
 * thousands). Pages are bounded by the work they do, not by a clock. Also the workflows facet, the open
 * run counts, the change probe and a run's key tree.
 *
 * Seeded: 60 % of runs in one big scope, the rest over 400 small ones;
 * workflows checkout (v1 older, v2 newer), refund, and a rare export;
 * 1 % failed, 0.5 % errored, 0.5 % cancelled, 100 running, 50 stuck, 300
 * waiting; a
 * creation time per run spread over 30 days.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { Clock } from '../../src/db/clock.js';
import { readTreeRows } from '../../src/read/sql/tree-rows.js';
import { whereKeysWent } from '../../src/read/sql/deliveries.js';
import { listRuns, runsStatement, runWorkflows, type ListRunsFilter } from '../../src/read/sql/runs.js';
import { openRunCounts, probeChanges } from '../../src/read/sql/figures.js';
import { useTestDatabase } from '../helpers/database.js';

const db = useTestDatabase({ max: 3 });
const clock = new Clock();
const RUNS = 200_000;

beforeAll(async () => {
  const sql = db().sql;
  await sql.unsafe(`
    insert into stepkey.ledger
      (scope, key, kind, name, fingerprint, status, outcome, outcome_ok, last_error, version, input,
       lease_token, locked_until, expires_at, wait_kind, wake_at, attempts, created_at, updated_at, completed_at)
    select scope, 'run-' || i, 'run', wf, 'fp', st,
           case when st in ('completed', 'cancelled') then '{"ok":true}' end,
           case when st = 'completed' then i % 200 <> 1 when st = 'cancelled' then false end,
           case when st = 'failed' then '{"message":"down"}' end,
           case when wf = 'checkout' and i < ${RUNS * 0.3} then 1 when wf = 'checkout' then 2 else 1 end,
           '{"n":1}',
           case when st = 'in_progress' then gen_random_uuid() end,
           case when st = 'in_progress' and i % 3 = 0 then now() - interval '1 minute'
                when st = 'in_progress' then now() + interval '1 hour' end,
           case when st not in ('in_progress', 'waiting') then now() + interval '1 day' end,
           case when st = 'waiting' then 'timer' end,
           case when st = 'waiting' then now() + interval '1 hour' end,
           1, at, at, case when st not in ('in_progress', 'waiting') then at end
      from (
        select i,
               case when i % 10 < 6 then 'big' else 'tenant-' || (i % 400) end as scope,
               case when i % 100 = 7 then 'export' when i % 4 = 1 then 'refund' else 'checkout' end as wf,
               case when i > ${RUNS - 150} then 'in_progress'
                    when i > ${RUNS - 450} then 'waiting'
                    when i % 100 = 3 then 'failed'
                    when i % 200 = 5 then 'cancelled'
                    else 'completed' end as st,
               now() - interval '30 days' + (i::float8 / ${RUNS}) * interval '30 days' as at
          from generate_series(1, ${RUNS}) i
      ) seeded`);
  await sql.unsafe(`
    insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
    select r.scope, md5(r.key || ':' || j), r.key, 'step-' || j || '.v1', '"ok"', true, 1, j - 1, r.created_at + j * interval '1 ms'
      from stepkey.ledger r cross join generate_series(1, 4) j
     where r.kind = 'run'`);
  await sql.unsafe('vacuum analyze stepkey.ledger, stepkey.steps');
});

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

/** The most buffer pages (8 kB each, hit or read) one page of a listing may touch. */
const BLOCKS = 500;

/** The plan of a statement: the indexes it reads, its scans of the ledger, and the buffer pages it touched. */
async function explain(text: string, values: unknown[]) {
  const [row] = await db().sql.unsafe(`explain (analyze, buffers, format json) ${text}`, values as never[]);
  const [result] = (row as unknown as { 'QUERY PLAN': [{ Plan: PlanNode }] })['QUERY PLAN'];
  const all = nodes(result.Plan);
  return {
    indexes: [...new Set(all.map((node) => node['Index Name']).filter(Boolean))] as string[],
    seqScans: all.filter((node) => node['Node Type'] === 'Seq Scan' && node['Relation Name'] === 'ledger').length,
    blocks: (result.Plan['Shared Hit Blocks'] ?? 0) + (result.Plan['Shared Read Blocks'] ?? 0),
  };
}

const cases: [string, Omit<ListRunsFilter, 'limit'>, string | string[]][] = [
  ['no filter', {}, 'ledger_runs_created_idx'],
  ['status completed', { status: 'completed' }, 'ledger_runs_created_idx'],
  ['status failed', { status: 'failed' }, 'ledger_runs_unsuccessful_idx'],
  ['status cancelled', { status: 'cancelled' }, 'ledger_runs_unsuccessful_idx'],
  ['status running', { status: 'running' }, 'ledger_run_leases_idx'],
  ['status stuck', { status: 'stuck' }, 'ledger_run_leases_idx'],
  ['status waiting', { status: 'waiting' }, 'ledger_due_idx'],
  ['a rare workflow', { workflow: 'export' }, 'ledger_runs_workflow_idx'],
  ['a workflow, all versions', { workflow: 'checkout' }, 'ledger_runs_workflow_idx'],
  ['a workflow and its old version', { workflow: 'checkout', version: 1 }, 'ledger_runs_workflow_idx'],
  ['a workflow, completed', { workflow: 'checkout', status: 'completed' }, 'ledger_runs_workflow_idx'],
  ['a workflow, its old version, completed', { workflow: 'checkout', version: 1, status: 'completed' }, 'ledger_runs_workflow_idx'],
  // checkout has most of the failed runs: the unsuccessful runs' index, filtered by workflow, is as narrow a way in.
  ['a workflow and a rare status', { workflow: 'checkout', status: 'failed' }, ['ledger_runs_unsuccessful_workflow_idx', 'ledger_runs_unsuccessful_idx']],
  ['a workflow and its cancelled runs', { workflow: 'refund', status: 'cancelled' }, 'ledger_runs_unsuccessful_workflow_idx'],
  ['a workflow and a parked status', { workflow: 'checkout', status: 'waiting' }, 'ledger_due_idx'],
  // The scope is a column of the index: it is checked there, without reading rows; for a tiny scope the primary key may win.
  ['a small scope', { scope: 'tenant-7' }, ['ledger_runs_created_idx', 'ledger_pkey']],
  ['the big scope', { scope: 'big' }, 'ledger_runs_created_idx'],
  ['one day', { from: Date.now() - 5 * 86_400_000, to: Date.now() - 4 * 86_400_000 }, 'ledger_runs_created_idx'],
];

describe('the runs listing on 200 000 runs and their 800 000 steps', () => {
  it.each(cases)('%s: served by %s, a page in < BLOCKS buffer pages', async (_name, filter, index) => {
    const full: ListRunsFilter = { ...filter, limit: 50, order: 'newest' };
    const statement = runsStatement(clock, full);
    const { indexes, seqScans, blocks } = await explain(statement.text, statement.values);
    expect(indexes.some((used) => (typeof index === 'string' ? [index] : index).includes(used))).toBe(true);
    expect(seqScans).toBe(0);
    expect(blocks).toBeLessThan(BLOCKS);
    const page = await listRuns(db().sql, clock, full);
    expect(page.runs.length).toBeGreaterThan(0);
    for (const run of page.runs) {
      if (filter.status) expect(run.status).toBe(filter.status);
      if (filter.workflow) expect(run.workflow).toBe(filter.workflow);
      if (filter.version) expect(run.version).toBe(filter.version);
      if (filter.scope) expect(run.scope).toBe(filter.scope);
    }
    const times = page.runs.map((run) => run.createdAt);
    expect([...times].sort((a, b) => b - a)).toEqual(times);
  });

  it('pages by cursor: the next page follows the last row, without overlap, through the same index', async () => {
    const first = await listRuns(db().sql, clock, { limit: 50, workflow: 'checkout' });
    expect(first.next).not.toBeNull();
    const filter: ListRunsFilter = { limit: 50, workflow: 'checkout', cursor: first.next! };
    const second = await listRuns(db().sql, clock, filter);
    expect(second.runs).toHaveLength(50);
    expect(second.runs[0]!.createdAt).toBeLessThanOrEqual(first.runs[49]!.createdAt);
    const seen = new Set(first.runs.map((run) => run.key));
    expect(second.runs.some((run) => seen.has(run.key))).toBe(false);
    const statement = runsStatement(clock, filter);
    const plan = await explain(statement.text, statement.values);
    expect(plan.indexes).toContain('ledger_runs_workflow_idx');
    expect(plan.blocks).toBeLessThan(BLOCKS);
    await expect(listRuns(db().sql, clock, { limit: 50, cursor: 'bm90LWEtY3Vyc29y' })).rejects.toThrow(/cursor is not one stepkey made/);
  });

  it('the attention order of `stepkey runs` reads each group through its index', async () => {
    const statement = runsStatement(clock, { limit: 50, order: 'attention' });
    const plan = await explain(statement.text, statement.values);
    expect(plan.seqScans).toBe(0);
    expect(plan.indexes).toEqual(expect.arrayContaining(['ledger_run_leases_idx', 'ledger_runs_unsuccessful_idx', 'ledger_runs_created_idx']));
    expect(plan.blocks).toBeLessThan(BLOCKS);
    const { runs } = await listRuns(db().sql, clock, { limit: 200, order: 'attention' });
    expect(runs.slice(0, 50).every((run) => run.status === 'stuck')).toBe(true);
    expect(runs[50]!.status).toBe('failed');
  });

  it('the facet, the open counts and a key tree never scan the ledger', async () => {
    // The facet's, the open counts' and the key tree's statements, recorded as sent and explained.
    const recorded: [string, unknown[]][] = [];
    const sql = db().sql;
    const spy = new Proxy(sql, {
      get(target, property, receiver) {
        if (property !== 'unsafe') return Reflect.get(target, property, receiver);
        return (text: string, values: unknown[]) => {
          recorded.push([text, values]);
          return target.unsafe(text, values as never[]);
        };
      },
    });
    expect(await runWorkflows(spy)).toEqual([
      { workflow: 'checkout', versions: [1, 2] },
      { workflow: 'export', versions: [1] },
      { workflow: 'refund', versions: [1] },
    ]);
    const [failed] = await db().sql`select count(*)::int as n from stepkey.ledger where kind = 'run' and status = 'failed'`;
    expect(await openRunCounts(spy, clock)).toEqual({ stuck: 50, needs_review: 0, running: 100, waiting: 300, failed: failed!.n });
    const probe = await probeChanges(db().sql, clock);
    expect(probe.nextLeaseEndMs).toBeGreaterThan(Date.now());
    const rows = await readTreeRows(spy, { key: 'run-12345' });
    expect(rows.filter((row) => row.depth === 1)).toHaveLength(4);
    await whereKeysWent(spy, rows.map((row) => row.row.key), [{ scope: rows[0]!.matchScope, key: 'run-12345' }]);
    // The facet, the open counts, the scopes that hold the key, that scope's tree, where its keys went.
    expect(recorded).toHaveLength(5);
    // Their plans, not their times: they are not pages, and this machine's load is not theirs to measure.
    for (const [text, values] of recorded) expect((await explain(text, values)).seqScans, text).toBe(0);
  });
});
