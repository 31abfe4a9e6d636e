/** The chaos run's figures, printed so that docs/development.md can quote them. */
import { faultKinds, type FaultKind } from './plan.js';
import type { FaultDone } from './faults.js';
import type { LoadFigures } from './load.js';
import type { SenderFinal } from './sender-load.js';

export interface RunFigures {
  seed: number;
  clients: number;
  load: LoadFigures;
  faults: FaultDone[];
  /** From the end of the last fault until the app had caught up (undefined: it never did). */
  settleMs: number | undefined;
  totalMs: number;
  /** What the event sender said when it stopped. */
  sender: SenderFinal | undefined;
  /** One line per process fault done. */
  processFaults: string[];
}

const sorted = (map: Map<string, number>) => [...map].sort((a, b) => b[1] - a[1]);

export function printFigures(run: RunFigures): void {
  const { load } = run;
  const requests = [...load.statuses.values()].reduce((sum, n) => sum + n, 0);
  const answered = load.keys.filter((key) => key.answer).length;
  const byKind = new Map<FaultKind, number>(faultKinds.map((kind) => [kind, 0]));
  for (const done of run.faults) byKind.set(done.fault.kind, (byKind.get(done.fault.kind) ?? 0) + 1);
  const lines = [
    `seed            ${run.seed}`,
    `clients         ${run.clients}`,
    `keys            ${load.keys.length} (${answered} answered 200)`,
    `HTTP requests   ${requests} (${(requests / Math.max(1, load.keys.length)).toFixed(2)} per key)`,
    `statuses        ${sorted(load.statuses).map(([status, n]) => `${status}: ${n}`).join(', ')}`,
    `faults          ${[...byKind].map(([kind, n]) => `${kind}: ${n}`).join(', ')}`,
    `process faults  ${run.processFaults.length} (${run.processFaults.map((line) => line.split(':')[0]).join('; ')})`,
    `event sender    ${run.sender ? `${run.sender.answered} of ${run.sender.total} sends answered; refused meanwhile: ${JSON.stringify(run.sender.refusals)}; pool: ${JSON.stringify(run.sender.health)}` : 'said nothing'}`,
    `settle time     ${run.settleMs === undefined ? 'did not settle' : `${(run.settleMs / 1000).toFixed(1)} s after the last fault`}`,
    `total time      ${(run.totalMs / 1000).toFixed(0)} s`,
  ];
  for (const { key, sentMs } of load.unanswered.slice(0, 5)) lines.push(`no answer in 30 s: ${key}, sent at ${(sentMs / 1000).toFixed(1)} s`);
  if (load.serverErrors.size > 0) {
    lines.push('5xx answers:');
    for (const [message, n] of sorted(load.serverErrors).slice(0, 8)) lines.push(`  ${n} × ${message}`);
  }
  console.log(`\n== chaos figures ==\n${lines.join('\n')}`);
}
