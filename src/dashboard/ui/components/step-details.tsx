/** One derived key of a run: its record, and where it went — downstream ledgers, outbox jobs, inbox deliveries. */
import type { AttemptView, ItemView, JobView, LedgerRowView } from '../../api-types.js';
import { ActionButton } from './action-button.js';
import { Chip, Stored, Time } from './bits.js';
import { clip, duration, errorMessage, plural, shortKey } from '../format.js';
import { href } from '../route.js';

export function StepDetails({ item, nowMs, onChange }: { item: ItemView; nowMs: number; onChange?: () => void }) {
  const row = item.row;
  const state = item.kind === 'message' ? 'message' : !row ? 'not recorded' : row.outcomeOk === false ? 'error' : row.status;
  return (
    <details class="step" id={`step-${item.key}`}>
      <summary>
        <span class="step-title">{item.name}</span> <span class="dim">{state}</span>
        {row ? <span class="dim"> · {plural(row.attempts, 'attempt')}</span> : item.attempts.length ? <span class="dim"> · {plural(item.attempts.length, 'attempt')}</span> : null}
        {item.downstream.length ? <span class="dim"> · {plural(item.downstream.length, 'downstream row')}</span> : null}
        {item.jobs.length ? <span class="dim"> · {plural(item.jobs.length, 'job')} waiting</span> : null}
        {item.inbox.length ? <span class="dim"> · delivered {plural(item.inbox.length, 'time')}</span> : null}
      </summary>
      <dl class="facts small">
        <div class="wide"><dt>Key</dt><dd class="key"><a href={href('key', { key: item.key })}>{item.key}</a></dd></div>
        {row ? <div><dt>Recorded</dt><dd><Time at={row.completedAt} now={nowMs} /></dd></div> : null}
      </dl>
      {row ? <Stored text={row.outcome} label={row.outcomeOk ? 'Output' : 'Error (stored, replayed)'} /> : null}
      <Attempts attempts={item.attempts} nowMs={nowMs} />
      <Downstream rows={item.downstream} nowMs={nowMs} />
      <Jobs jobs={item.jobs} nowMs={nowMs} onChange={onChange} />
      {item.inbox.length ? (
        <ul class="plain">
          {item.inbox.map((entry) => (
            <li key={entry.consumer}>Delivered to consumer <strong>{entry.consumer}</strong> <Time at={entry.processedAt} now={nowMs} /></li>
          ))}
        </ul>
      ) : null}
    </details>
  );
}

export function Downstream({ rows, nowMs }: { rows: LedgerRowView[]; nowMs: number }) {
  if (rows.length === 0) return null;
  return (
    <table class="grid compact">
      <caption>Rows under this key in other scopes (downstream ledgers): one row, one effect</caption>
      <thead><tr><th scope="col">Scope</th><th scope="col">Kind</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Outcome</th><th scope="col">At</th></tr></thead>
      <tbody>
        {rows.map((other) => (
          <tr key={`${other.scope}\u0000${other.key}`}>
            <td>{other.scope}</td>
            <td>{other.kind}</td>
            <td>{other.name ?? ''}</td>
            <td>{other.status}</td>
            <td class="num">{other.attempts}</td>
            <td class="detail">{other.outcome === null ? '' : other.outcomeOk ? clip(other.outcome, 80) : `error: ${clip(errorMessage(other.outcome), 70)}`}</td>
            <td><Time at={other.createdAt} now={nowMs} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function Jobs({ jobs, nowMs, onChange, showKey = false }: { jobs: JobView[]; nowMs: number; onChange?: (() => void) | undefined; showKey?: boolean }) {
  if (jobs.length === 0) return null;
  return (
    <table class="grid compact">
      <caption>{showKey ? 'Jobs, failed first' : 'Outbox jobs still waiting under this key (finished jobs are deleted)'}</caption>
      <thead><tr><th scope="col">Job</th><th scope="col">Task</th>{showKey ? <th scope="col">Message key</th> : null}<th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Next run</th><th scope="col">Last error</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
      <tbody>
        {jobs.map((job) => (
          <tr key={job.id}>
            <td class="num">#{job.id}</td>
            <td>{job.task}</td>
            {showKey ? <td class="key">{job.key ? <a href={href('key', { key: job.key })} title={job.key}>{shortKey(job.key)}</a> : ''}</td> : null}
            <td><Chip kind="job" text={job.status} /></td>
            <td class="num">{job.attempts}/{job.maxAttempts}</td>
            <td>{job.status === 'failed' ? '—' : <Time at={job.runAt} now={nowMs} />}</td>
            <td class="detail">{clip(job.lastError ?? '', 80)}</td>
            <td>
              {job.status === 'failed' || job.status === 'retrying' ? (
                <ActionButton action="retry" label="Retry" question={`Retry job #${job.id} (${job.task}) now?`} body={{ ids: [job.id] }} onDone={onChange}>
                  <p>The job is due now with its attempts reset; a worker delivers it. Its consumer applies it once, through its inbox.</p>
                </ActionButton>
              ) : null}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The effect record of a call or an enqueue: every attempt, how it ended, and how an unknown one was settled. */
export function Attempts({ attempts, nowMs }: { attempts: AttemptView[]; nowMs: number }) {
  if (attempts.length === 0) return null;
  return (
    <table class="grid compact">
      <caption>Attempts recorded (the effect record): an attempt with no end may have reached the callee</caption>
      <thead><tr><th scope="col">Attempt</th><th scope="col">Kind</th><th scope="col">Started</th><th scope="col">Took</th><th scope="col">Outcome</th><th scope="col">Settled</th><th scope="col">Error</th></tr></thead>
      <tbody>
        {attempts.map((attempt) => (
          <tr key={attempt.attempt}>
            <td class="num">{attempt.attempt}</td>
            <td>{attempt.kind}</td>
            <td><Time at={attempt.startedAt} now={nowMs} /></td>
            <td>{attempt.endedAt === null ? '—' : duration(attempt.endedAt - attempt.startedAt)}</td>
            <td><Chip kind="attempt" text={attempt.outcome ?? 'unknown (no end)'} /></td>
            <td>{attempt.resolution ?? ''}</td>
            <td class="detail">{attempt.error ? clip(errorMessage(attempt.error), 80) : ''}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
