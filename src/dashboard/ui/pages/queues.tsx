/**
 * Queues: per queue and partition, the runs waiting for a slot (depth), the
 * slots held, the limits, and the recent rate of starts — the read model of
 * `stepkey queues`. The rate is the slots granted over the last few seconds
 * of this page's readings (each poll is one; a reading that found nothing
 * changed counts as one too, so a queue that stopped starting runs shows 0).
 */
import { useRef } from 'preact/hooks';
import type { QueuePartitionView, QueuesView } from '../../api-types.js';
import { Empty, Live, Section } from '../components/bits.js';
import { useLive } from '../live.js';
import { href } from '../route.js';

/** How far back the rate looks. */
const RATE_WINDOW_MS = 10_000;

interface Sample {
  at: number;
  served: Map<string, number>;
}

const idOf = (row: QueuePartitionView) => `${row.queue}\u0000${row.partition}`;

export function QueuesPage() {
  const live = useLive<QueuesView>('queues', {});
  const samples = useRef<Sample[]>([]);
  const view = live.data;
  if (view && live.checkedAt > 0) {
    const list = samples.current;
    if (list.length === 0 || list[list.length - 1]!.at !== live.checkedAt) {
      list.push({ at: live.checkedAt, served: new Map(view.partitions.map((row) => [idOf(row), row.served])) });
      while (list.length > 2 && live.checkedAt - list[1]!.at >= RATE_WINDOW_MS) list.shift();
    }
  }
  const rate = (row: QueuePartitionView): string => {
    const list = samples.current;
    const first = list[0];
    const last = list[list.length - 1];
    if (!first || !last || last.at - first.at < 500) return '…';
    const before = first.served.get(idOf(row)) ?? row.served;
    return (((row.served - before) * 1000) / (last.at - first.at)).toFixed(1);
  };
  const queues = view ? [...new Set(view.partitions.map((row) => row.queue))] : [];
  return (
    <>
      <div class="page-head">
        <h1>Queues</h1>
        <Live checkedAt={live.checkedAt} error={live.error} />
      </div>
      {view ? (
        <>
          <p class="dim">
            Per queue and partition: runs waiting for a slot, slots held, and starts per second over the last {RATE_WINDOW_MS / 1000} s this page has watched. Dispatch starts higher priorities first, takes turns across partitions, and the partition served least recently first.
          </p>
          {queues.length === 0 ? <Empty>No queue has been used against this database.</Empty> : queues.map((name) => {
            const rows = view.partitions.filter((row) => row.queue === name);
            const head = rows[0]!;
            const limits = `concurrency ${head.concurrency}${head.perPartition ? `, ${head.perPartition} per partition` : ''}${head.rateLimit ? `, rate ${head.rateLimit}` : ''}`;
            const total = (pick: (row: QueuePartitionView) => number) => rows.reduce((sum, row) => sum + pick(row), 0);
            return (
              <Section key={name} title={`Queue ${name}`}>
                <p class="dim">{limits} · {total((row) => row.waiting)} waiting · {total((row) => row.running)} running</p>
                <table class="grid" aria-label={`Partitions of queue ${name}`}>
                  <thead>
                    <tr><th scope="col">Partition</th><th scope="col" class="num">Waiting</th><th scope="col" class="num">Running</th><th scope="col" class="num">Starts/s</th><th scope="col" class="num">Started in all</th><th scope="col">Last started</th></tr>
                  </thead>
                  <tbody>
                    {rows.map((row) => (
                      <tr key={idOf(row)}>
                        <td>{row.partition === '' ? <span class="dim">{row.served === 0 && row.waiting === 0 && row.running === 0 ? '(no run yet)' : '(one line)'}</span> : row.partition}</td>
                        <td class="num">{row.waiting}</td>
                        <td class="num">{row.running}</td>
                        <td class="num">{rate(row)}</td>
                        <td class="num">{row.served}</td>
                        <td>{row.lastServedAt ? new Date(row.lastServedAt).toISOString() : '—'}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
                <p><a href={href('runs', { status: 'waiting' })}>Waiting runs, with their place in line</a></p>
              </Section>
            );
          })}
        </>
      ) : live.error ? null : <p>Loading…</p>}
    </>
  );
}
