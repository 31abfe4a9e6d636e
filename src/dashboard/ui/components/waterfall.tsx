/**
 * A run's steps over time. Each step's bar runs from the previous step's
 * record (or the run's start) to its own: the ledger records when a step's
 * outcome was written, so a bar is the time the run spent getting to it —
 * every attempt and backoff included (the attempts are counted on the bar).
 */
import type { MatchView } from '../../api-types.js';
import { duration, errorMessage, plural } from '../format.js';

export function Waterfall({ match, nowMs }: { match: MatchView; nowMs: number }) {
  const start = match.row.createdAt;
  const recorded = match.items.filter((item) => item.row);
  const open = match.row.status === 'in_progress' || match.row.status === 'waiting';
  const end = Math.max(match.row.completedAt ?? (open ? nowMs : match.row.updatedAt), ...recorded.map((item) => item.row!.completedAt ?? 0), start + 1);
  const span = end - start;
  let previous = start;
  return (
    <ol class="waterfall" aria-label="Steps over time">
      {match.items.map((item) => {
        const at = item.row?.completedAt ?? null;
        const from = previous;
        if (at !== null) previous = at;
        const left = ((from - start) / span) * 100;
        const width = at === null ? 0 : Math.max(0.6, ((at - from) / span) * 100);
        const failed = item.row?.outcomeOk === false;
        // The step a parked run waits at: waiting since its park, not "not recorded".
        const waiting = at === null && match.row.status === 'waiting' && match.row.waitStep === item.name;
        const label = waiting
          ? `waiting for ${match.row.waitKind ?? 'its wait'} since ${duration(nowMs - match.row.updatedAt)}`
          : at === null ? 'not recorded: not reached, or in flight' : `${failed ? 'error' : 'done'} after ${duration(at - from)} · ${plural(item.row!.attempts, 'attempt')}`;
        return (
          <li key={item.key}>
            <a class="step-name" href={`#step-${item.key}`} onClick={(event) => { event.preventDefault(); document.getElementById(`step-${item.key}`)?.scrollIntoView(); }}>
              {item.name}
            </a>
            <span class="track" role="img" aria-label={`${item.name}: ${label}`}>
              {waiting ? (
                <span class="bar waiting tone-warning" style={{ left: `${Math.min(left, 99)}%`, width: `${Math.max(0.6, 100 - left)}%` }} />
              ) : at === null ? (
                <span class="bar pending" style={{ left: `${Math.min(left, 99)}%` }} />
              ) : (
                <span class={`bar ${failed ? 'tone-danger' : 'tone-ok'}`} style={{ left: `${left}%`, width: `${Math.min(width, 100 - left)}%` }}>
                  {item.row!.attempts > 1 ? <span class="attempts">×{item.row!.attempts}</span> : null}
                </span>
              )}
            </span>
            <span class="step-note">{waiting ? 'waiting' : at === null ? 'not recorded' : failed ? `error: ${errorMessage(item.row!.outcome)}` : `+${duration(at - start)}`}</span>
          </li>
        );
      })}
    </ol>
  );
}
