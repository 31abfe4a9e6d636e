/**
 * Where a workflow run's time goes: the 3-step run of workflow.bench.ts
 * taken apart, layer by layer, each layer measured against the ceiling in the
 * same repetition (in turns, each repetition on a fresh database):
 *
 *   plain SQL          the run's record written by hand: the run row (in the
 *                      ledger), three business rows, three step rows (in
 *                      stepkey.steps), the completion, in the engine's three
 *                      transactions (BEGIN and COMMIT sent with their
 *                      neighbours, as the engine sends them), as plain
 *                      INSERT/UPDATE statements on raw postgres.js
 *                      connections — what the record costs with no engine
 *   plain SQL, bare    the same, the run row and the step rows in narrow
 *                      tables of their own (primary key only, no row check):
 *                      the least any record of the run and its steps costs
 *                      in these three transactions (a what-if, not a schema)
 *   engine SQL         the engine's own statements (probe, claim, step rows
 *                      with their fences, completion), built by its builders,
 *                      on raw postgres.js connections
 *   engine SQL, tx     the same through stepkey's Transaction (pipelined
 *                      BEGIN and COMMIT, SET LOCAL statement_timeout in the
 *                      second and third, the connection tracking)
 *   engine SQL, tx +   the same with the first step's savepoint and SET
 *     savepoint        LOCAL, which the engine sends after the run's claim
 *                      in the first transaction
 *   engine             engine.run of the 3-step workflow
 *   engine, bare       the same on a ledger stripped to its primary key (no
 *     ledger           secondary index, row check or trigger): what the rest
 *                      of the schema costs a run (a what-if, not a schema)
 *
 * Each row also gives the Node CPU per run (this process, user + system),
 * the median of its repetitions: the layers' JavaScript, postgres.js's
 * included, where the ratio to the ceiling is both processes' work.
 *
 * The gaps between neighbouring rows are the costs of one layer each.
 */
import { randomUUID } from 'node:crypto';
import { connect, type Database, type Sql } from '../../src/db/connect.js';
import { systemClock } from '../../src/db/clock.js';
import { statementTimeout, Transaction } from '../../src/db/transaction.js';
import { childKey, newRootKey } from '../../src/keys/derive.js';
import { insertClaimRow, probeRow } from '../../src/ledger/sql/claim.js';
import { createEngine } from '../../src/engine/engine.js';
import { insertStepRowsStatement, type StepRow } from '../../src/workflow/sql/step-rows.js';
import { benchDatabase, measure, printTable, type Measurement } from './harness.js';
import { threeSteps } from './workflow.bench.js';

type Op = (i: number) => Promise<unknown>;
const scope = 'bench';
const leaseMs = 30_000;
const stepTimeoutMs = 30_000;

/**
 * The run's record in plain statements, in the engine's three transactions: in stepkey's
 * tables, or in narrow tables with a primary key only (`bare`).
 */
function plainSql(sql: Sql, tables: 'stepkey' | 'bare'): Op {
  const runs = tables === 'bare' ? 'bench_runs' : 'stepkey.ledger';
  const stepRow = (tx: Sql, run: string, root: string, name: string, seq: number) =>
    tables === 'bare'
      ? tx`insert into bench_steps (scope, run_key, name, outcome, ok, seq) values (${scope}, ${run}, ${name}, 'null', true, ${seq})`
      : tx`insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
           values (${scope}, ${childKey(root, name)}, ${run}, ${name}, 'null', true, 1, ${seq}, now())`;
  return async (i) => {
    const key = `w-${i}`;
    const token = randomUUID();
    const root = newRootKey(scope, key);
    await sql`select status from ${sql(runs)} where scope = ${scope} and key = ${key}`;
    // The run's start rides its first step's transaction.
    let tx = await sql.reserve();
    void tx`begin`.execute();
    void (
      tables === 'bare'
        ? tx`insert into bench_runs (scope, key, name, fingerprint, status, version, input, root_key, lease_token, locked_until)
             values (${scope}, ${key}, 'bench-three', 'fingerprint', 'in_progress', 1, ${JSON.stringify({ n: i })}, ${root},
                     ${token}::uuid, now() + interval '30 seconds')`
        : tx`insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, version, input, root_key, lease_token, locked_until, flow)
             values (${scope}, ${key}, 'run', 'bench-three', 'fingerprint', 'in_progress', 1, ${JSON.stringify({ n: i })}, ${root},
                     ${token}::uuid, now() + interval '30 seconds', false)`
    ).execute();
    await tx`insert into bench_rows (n) values (${i})`;
    await Promise.all([stepRow(tx, key, root, 'a', 0), tx`commit`]);
    tx.release();
    // The middle step's row, fenced by a share lock on the run row.
    tx = await sql.reserve();
    void tx`begin`.execute();
    await tx`insert into bench_rows (n) values (${i})`;
    await Promise.all([
      tx`select 1 from ${tx(runs)} where scope = ${scope} and key = ${key} and lease_token = ${token}::uuid and status = 'in_progress' for share`,
      stepRow(tx, key, root, 'b', 1),
      tx`commit`,
    ]);
    tx.release();
    // The last step's row with the run's completion, fenced by its UPDATE.
    tx = await sql.reserve();
    void tx`begin`.execute();
    await tx`insert into bench_rows (n) values (${i})`;
    await Promise.all([
      tx`update ${tx(runs)}
            set status = 'completed', outcome = ${String(i)}, outcome_ok = true, lease_token = null, locked_until = null,
                completed_at = now(), updated_at = now(), expires_at = now() + interval '1 day'
          where scope = ${scope} and key = ${key} and lease_token = ${token}::uuid and status = 'in_progress'`,
      stepRow(tx, key, root, 'c', 2),
      tx`commit`,
    ]);
    tx.release();
  };
}

/** The engine's statements, from its own builders, on raw connections or through its Transaction. */
function engineSql(sql: Sql, throughTransaction: boolean, startSavepoint = false): Op {
  const clock = systemClock;
  const row = (root: string, name: string, seq: number): StepRow[] => [{ key: childKey(root, name), name, ok: true, body: 'null', attempts: 1, seq }];
  const begin = async (first: boolean) => {
    if (throughTransaction) {
      const transaction = await Transaction.begin(sql, first ? {} : { statementTimeoutMs: stepTimeoutMs });
      return { q: transaction.sql as unknown as Sql, commit: (last: ReturnType<typeof insertStepRowsStatement>) => transaction.commit(last) };
    }
    const tx = await sql.reserve();
    void tx`begin`.execute();
    return {
      q: tx as unknown as Sql,
      commit: async (last: ReturnType<typeof insertStepRowsStatement>) => {
        await Promise.all([last, tx`commit`]);
        tx.release();
      },
    };
  };
  return async (i) => {
    const key = `w-${i}`;
    const root = newRootKey(scope, key);
    const request = {
      scope,
      key,
      fingerprint: 'fingerprint',
      kind: 'run' as const,
      name: 'bench-three',
      run: { version: 1, input: JSON.stringify({ n: i }), traceContext: null, flow: false },
      rootKey: root,
    };
    const lease = { scope, key, token: randomUUID() };
    await probeRow(sql, clock, request);
    let tx = await begin(true);
    await insertClaimRow(tx.q, clock, request, lease.token, leaseMs);
    // The first step's savepoint and SET LOCAL, pipelined after the claim as the engine sends them.
    if (startSavepoint) void tx.q.unsafe(`savepoint stepkey_start; ${statementTimeout(stepTimeoutMs)}`).execute();
    await tx.q`insert into bench_rows (n) values (${i})`;
    await tx.commit(insertStepRowsStatement(tx.q, clock, lease, row(root, 'a', 0), [], { kind: 'ownStart' }));
    tx = await begin(false);
    await tx.q`insert into bench_rows (n) values (${i})`;
    await tx.commit(insertStepRowsStatement(tx.q, clock, lease, row(root, 'b', 1), [], { kind: 'share' }));
    tx = await begin(false);
    await tx.q`insert into bench_rows (n) values (${i})`;
    const complete = { kind: 'complete' as const, outcome: { ok: true, body: String(i) }, retentionMs: 86_400_000 };
    await tx.commit(insertStepRowsStatement(tx.q, clock, lease, row(root, 'c', 2), [], complete));
  };
}

/**
 * A what-if for the engine.run layer: the ledger stripped to its primary key — no secondary
 * index, no row check, no trigger — what the rest of the schema costs the run.
 */
async function stripLedger(db: Database): Promise<void> {
  const indexes = await db.sql<{ name: string }[]>`
    select indexrelid::regclass::text as name from pg_index where indrelid = 'stepkey.ledger'::regclass and not indisprimary`;
  for (const { name } of indexes) await db.sql.unsafe(`drop index ${name}`);
  // Every CHECK the table has, whatever a migration named it.
  const checks = await db.sql<{ name: string }[]>`
    select conname as name from pg_constraint where conrelid = 'stepkey.ledger'::regclass and contype = 'c'`;
  for (const { name } of checks) await db.sql.unsafe(`alter table stepkey.ledger drop constraint ${name}`);
  const triggers = await db.sql<{ name: string }[]>`
    select tgname as name from pg_trigger where tgrelid = 'stepkey.ledger'::regclass and not tgisinternal`;
  for (const { name } of triggers) await db.sql.unsafe(`drop trigger ${name} on stepkey.ledger`);
}

const layers: {
  label: string;
  op: (db: Database, engine: ReturnType<typeof createEngine>) => Op;
  setup?: (db: Database) => Promise<void>;
}[] = [
  {
    label: '4 bare transactions (the ceiling)',
    op: (db) => async (i) => {
      for (let t = 0; t < 4; t += 1) await db.sql.begin((tx) => tx`insert into bench_rows (n) values (${i})`);
    },
  },
  { label: 'the record in plain SQL', op: (db) => plainSql(db.sql, 'stepkey') },
  { label: 'the same in primary-key-only tables (what-if)', op: (db) => plainSql(db.sql, 'bare') },
  { label: "the engine's statements, raw connections", op: (db) => engineSql(db.sql, false) },
  { label: "the engine's statements through its Transaction", op: (db) => engineSql(db.sql, true) },
  { label: "the same, the start's savepoint in the first", op: (db) => engineSql(db.sql, true, true) },
  { label: '3-step workflow (engine.run)', op: (_db, engine) => (i) => engine.run(threeSteps, { scope, key: `w-${i}` }, { n: i }) },
  {
    label: 'the same on a ledger with its primary key only (what-if)',
    op: (_db, engine) => (i) => engine.run(threeSteps, { scope, key: `w-${i}` }, { n: i }),
    setup: stripLedger,
  },
];

export async function workflowPartsBench(options: { ops: number; runs: number }): Promise<void> {
  const database = await benchDatabase();
  const repetitions = Math.max(5, options.runs);
  try {
    const rows: (string | number)[][] = [];
    for (const concurrency of [1, 32]) {
      const results = layers.map((): (Measurement & { nodeCpuMs: number })[] => []);
      for (let repetition = 0; repetition < repetitions; repetition += 1) {
        for (const [index, layer] of layers.entries()) {
          const fresh = await database.fresh();
          const db = connect(fresh.url, { max: 40 });
          const engine = createEngine({ database: db, workflows: [threeSteps], onError: () => {}, logger: false });
          try {
            await db.sql`create table bench_rows (id bigserial primary key, n int not null)`;
            await db.sql`create table bench_steps (scope text not null, run_key text not null, name text not null,
                           outcome text not null, ok boolean not null, attempts int not null default 1, seq int,
                           completed_at timestamptz not null default now(), primary key (scope, run_key, name))`;
            await db.sql`create table bench_runs (scope text not null, key text not null, name text not null, fingerprint text not null,
                           status text not null, version int, input text, root_key text, lease_token uuid, locked_until timestamptz,
                           outcome text, outcome_ok boolean, attempts int not null default 1, expires_at timestamptz,
                           created_at timestamptz not null default now(), updated_at timestamptz not null default now(),
                           completed_at timestamptz, primary key (scope, key))`;
            await layer.setup?.(db);
            const op = layer.op(db, engine);
            await measure(200, concurrency, (i) => op(1_000_000 + i));
            const cpu = process.cpuUsage();
            const measured = await measure(options.ops, concurrency, op);
            const used = process.cpuUsage(cpu);
            results[index]!.push({ ...measured, nodeCpuMs: (used.user + used.system) / 1000 / options.ops });
          } finally {
            await engine.shutdown();
            await db.close();
            await fresh.drop();
          }
        }
      }
      const median = <T>(all: T[], by: (m: T) => number) => [...all].sort((a, b) => by(a) - by(b))[Math.floor(all.length / 2)]!;
      const medians = results.map((all) => median(all, (m) => m.opsPerSecond));
      const ceiling = medians[0]!;
      for (const [index, layer] of layers.entries()) {
        const m = medians[index]!;
        const cpu = median(results[index]!, (r) => r.nodeCpuMs).nodeCpuMs;
        rows.push([`${layer.label}, c=${concurrency}`, m.opsPerSecond, m.p50Ms, m.p99Ms, (m.opsPerSecond / ceiling.opsPerSecond).toFixed(2), cpu.toFixed(3)]);
      }
    }
    printTable(
      `Where a 3-step run's time goes (${options.ops} runs per measurement; median of ${repetitions}, layers taken in turns, each on a fresh database)`,
      ['layer', 'runs/s', 'p50 ms', 'p99 ms', 'vs ceiling', 'Node CPU ms/run'],
      rows,
    );
  } finally {
    await database.close();
  }
}
