/**
 * `stepkey queues`: per queue and partition, the runs waiting for a slot
 * (depth), the slots held (running), and the recent rate of starts — the
 * slots granted between two readings `--sample-ms` apart. Then the step
 * limits (defineLimit) the same way: per limit and partition, slots held,
 * runs parked waiting, and grants per second.
 */
import { listQueues, type QueuePartitionRow } from '../../read/sql/queues.js';
import { listLimits, type LimitPartitionRow } from '../../read/sql/limits.js';
import { positiveIntFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { ExitCode } from '../errors.js';
import { renderTable } from '../table.js';

export const queuesCommand: Command = {
  name: 'queues',
  description: `
Lists every queue (defineQueue) and its partitions: runs waiting for a slot
(depth), slots held (running), the queue's concurrency and rate limit, and
the starts per second over the last --sample-ms (default 1000): the slots
granted between two readings that far apart. Then every step limit
(defineLimit) and its partitions: its rate and concurrency, slots held, runs
parked waiting for it, and grants per second over the same sample.`,
  positionals: [],
  options: {
    queue: { type: 'string', value: 'NAME', description: 'only this queue' },
    limit: { type: 'string', value: 'NAME', description: 'only this step limit' },
    'sample-ms': { type: 'string', value: 'MS', description: 'how long to count starts for the rate (default 1000)' },
  },
  async run(context, parsed) {
    const queue = stringFlag(parsed.values, 'queue');
    const limit = stringFlag(parsed.values, 'limit');
    const sampleMs = positiveIntFlag(parsed.values, 'sample-ms', 'queues') ?? 1000;
    const read = (sql: Parameters<typeof listQueues>[0]) =>
      Promise.all([listQueues(sql, queue ? { queue } : {}), listLimits(sql, limit ? { limit } : {})]);
    const { before, after } = await context.withPool(async (database) => {
      const first = await read(database.sql);
      await new Promise((resolve) => setTimeout(resolve, sampleMs));
      return { before: first, after: await read(database.sql) };
    });
    const id = (row: QueuePartitionRow) => `${row.queue}\u0000${row.partition}`;
    const earlier = new Map(before[0].map((row) => [id(row), row.served]));
    const rows = after[0].map((row) => ({ ...row, startsPerSecond: ((row.served - (earlier.get(id(row)) ?? 0)) * 1000) / sampleMs }));
    const limitId = (row: LimitPartitionRow) => `${row.limit}\u0000${row.partition}`;
    const earlierLimits = new Map(before[1].map((row) => [limitId(row), row.granted]));
    const limits = after[1].map((row) => ({ ...row, grantsPerSecond: ((row.granted - (earlierLimits.get(limitId(row)) ?? 0)) * 1000) / sampleMs }));
    if (context.json) {
      context.printJson({ sampleMs, queues: rows, limits });
      return ExitCode.ok;
    }
    const tables = [rows.length ? renderQueues(rows) : '', limits.length ? renderLimits(limits) : ''].filter(Boolean);
    context.line(tables.length ? tables.join('\n\n') : 'No queues and no step limits.');
    return ExitCode.ok;
  },
};

function renderQueues(rows: (QueuePartitionRow & { startsPerSecond: number })[]): string {
  return renderTable(
    [
      { header: 'queue' },
      { header: 'partition', max: 40 },
      { header: 'waiting', align: 'right' },
      { header: 'running', align: 'right' },
      { header: 'limit' },
      { header: 'starts/s', align: 'right' },
    ],
    rows.map((row) => [
      row.queue,
      row.partition === '' ? '—' : row.partition,
      String(row.waiting),
      String(row.running),
      `${row.concurrency}${row.perPartition ? ` (${row.perPartition} each)` : ''}${row.rateLimit ? `, ${row.rateLimit}` : ''}`,
      row.startsPerSecond.toFixed(1),
    ]),
  );
}

function renderLimits(rows: (LimitPartitionRow & { grantsPerSecond: number })[]): string {
  return renderTable(
    [
      { header: 'step limit' },
      { header: 'partition', max: 40 },
      { header: 'waiting', align: 'right' },
      { header: 'held', align: 'right' },
      { header: 'limit' },
      { header: 'grants/s', align: 'right' },
    ],
    rows.map((row) => [
      row.limit,
      row.partition === '' ? '—' : row.partition,
      String(row.waiting),
      String(row.held),
      [row.concurrency === null ? null : `${row.concurrency} at once`, row.rateLimit].filter(Boolean).join(', '),
      row.grantsPerSecond.toFixed(1),
    ]),
  );
}
