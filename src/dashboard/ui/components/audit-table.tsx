/** Operator actions, newest first: who, through what, whether it changed anything. */
import type { AuditView } from '../../api-types.js';
import { Time } from './bits.js';
import { href } from '../route.js';

export function AuditTable({ entries, nowMs, showTarget = false }: { entries: AuditView[]; nowMs: number; showTarget?: boolean }) {
  return (
    <table class="grid compact">
      <thead>
        <tr>
          <th scope="col">When</th>
          <th scope="col">Action</th>
          {showTarget ? <th scope="col">On</th> : null}
          <th scope="col">By</th>
          <th scope="col">Through</th>
          <th scope="col">Result</th>
          <th scope="col">Detail</th>
        </tr>
      </thead>
      <tbody>
        {entries.map((entry) => (
          <tr key={`${entry.scope}\u0000${entry.id}`}>
            <td><Time at={entry.at} now={nowMs} /></td>
            <td>{entry.action.replace('_', ' ')}</td>
            {showTarget ? (
              <td class="key">
                {entry.jobId ? `job #${entry.jobId}` : entry.key ? <a href={href('run', { scope: entry.scope, key: entry.key })}>{entry.key}</a> : ''}
              </td>
            ) : null}
            <td>{entry.actor}</td>
            <td>{entry.source}</td>
            <td>{entry.applied ? 'applied' : 'nothing to do'}</td>
            <td class="detail">{detailText(entry.detail)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function detailText(detail: string | null): string {
  if (!detail) return '';
  try {
    const parsed = JSON.parse(detail) as { reason?: string; before?: string; step?: string; resolution?: string; output?: string; from?: string; rerunKey?: string };
    const answer = parsed.resolution === 'retried' ? 'call again' : `output ${(parsed.output ?? '').slice(0, 80)}`;
    return [
      parsed.before ? `was ${parsed.before}` : '',
      parsed.reason ? `reason: ${parsed.reason}` : '',
      parsed.step && parsed.resolution ? `step ${parsed.step}: ${answer}` : '',
      parsed.from && parsed.rerunKey ? `from step ${parsed.from}, as run ${parsed.rerunKey}` : '',
    ].filter(Boolean).join(' · ');
  } catch {
    return detail;
  }
}
