/**
 * One run: its facts (the wait it is parked in), its input and outcome, its
 * steps as a waterfall, each step's attempts and where its key went (outbox
 * jobs, deliveries, downstream ledgers), its child runs and reruns, and its
 * audit trail.
 */
import type { KeyTreeView, MatchView, QueuePlaceView } from '../../api-types.js';
import { ActionButton } from '../components/action-button.js';
import { Empty, Live, RunStatus, Section, Stored, Time } from '../components/bits.js';
import { AuditTable } from '../components/audit-table.js';
import { Waterfall } from '../components/waterfall.js';
import { StepDetails } from '../components/step-details.js';
import { duration, plural, shortKey } from '../format.js';
import { useLive } from '../live.js';
import { href } from '../route.js';

export function RunPage({ params }: { params: URLSearchParams }) {
  const scope = params.get('scope') ?? '';
  const key = params.get('key') ?? '';
  const live = useLive<KeyTreeView>('run', { scope, key });
  const match = live.data?.matches[0];
  return (
    <>
      <div class="page-head">
        <h1>
          Run <span class="key">{key}</span>
        </h1>
        <Live checkedAt={live.checkedAt} error={live.error} />
      </div>
      <p class="crumbs">
        <a href={href('runs', { scope })}>Runs in scope {scope}</a> · <a href={href('key', { key, scope })}>look the key up</a>
      </p>
      {live.data && !match ? <Empty>No key '{key}' in scope '{scope}': it may never have existed, or expired and was purged.</Empty> : null}
      {match && live.data ? <RunBody match={match} nowMs={live.data.nowMs} reload={live.reload} /> : null}
      {!live.data && !live.error ? <p>Loading…</p> : null}
    </>
  );
}

function RunBody({ match, nowMs, reload }: { match: MatchView; nowMs: number; reload: () => void }) {
  const { row } = match;
  const ref = { scope: row.scope, key: row.key };
  const canCancel = row.kind === 'run' && (row.status === 'in_progress' || row.status === 'waiting' || row.status === 'failed');
  const canResume = row.kind === 'run' && (row.status === 'failed' || match.runStatus === 'stuck');
  const end = row.completedAt ?? (row.status === 'in_progress' ? nowMs : row.updatedAt);
  return (
    <>
      <dl class="facts">
        <div><dt>Status</dt><dd><RunStatus name={match.runStatus ?? row.status} /></dd></div>
        <div><dt>Workflow</dt><dd>{match.workflow ? `${match.workflow.name}@${match.workflow.version}` : (row.name ?? row.kind)}</dd></div>
        <div><dt>Scope</dt><dd>{row.scope}</dd></div>
        <div><dt>Executions</dt><dd>{plural(row.attempts, 'attempt')}</dd></div>
        <div><dt>Created</dt><dd><Time at={row.createdAt} now={nowMs} /></dd></div>
        {row.status === 'waiting' ? (
          <div><dt>Waiting for</dt><dd>{duration(nowMs - row.updatedAt)}</dd></div>
        ) : (
          <div><dt>{row.completedAt ? 'Took' : 'Running for'}</dt><dd>{duration(end - row.createdAt)}</dd></div>
        )}
        {row.status === 'in_progress' && row.lockedUntil !== null ? (
          <div><dt>Lease</dt><dd>{row.lockedUntil > nowMs ? `ends in ${duration(row.lockedUntil - nowMs)}` : `expired ${duration(nowMs - row.lockedUntil)} ago`}</dd></div>
        ) : null}
        {row.status === 'waiting' ? (
          <div><dt>Waits for</dt><dd>{row.waitKind}{row.waitFor ? ` ${row.waitFor}` : ''}{row.waitStep ? ` (step ${row.waitStep})` : ''}{row.wakeAt !== null ? <>, due <Time at={row.wakeAt} now={nowMs} /></> : null}</dd></div>
        ) : null}
        {match.queue ? <div class="wide"><dt>Queue</dt><dd>{queueFact(match.queue, nowMs)}</dd></div> : null}
        {row.parentRun ? <div><dt>Child of</dt><dd><a href={href('run', { scope: row.scope, key: row.parentRun })}>{row.parentRun}</a></dd></div> : null}
        {row.expiresAt !== null ? <div><dt>Key expires</dt><dd><Time at={row.expiresAt} now={nowMs} /></dd></div> : null}
        <div class="wide"><dt>Root key</dt><dd class="key">{match.rootKey}</dd></div>
      </dl>
      {canCancel || canResume ? (
        <div class="actions" role="group" aria-label="Actions on this run">
          {canResume ? (
            <ActionButton action="resume" label="Resume" question={`Resume run ${row.key}?`} body={ref} onDone={reload}>
              <p>The run becomes due: a worker's sweeper continues it from its last finished step, under workflow version {row.version}. Nothing runs in the dashboard.</p>
            </ActionButton>
          ) : null}
          {canCancel ? (
            <ActionButton action="cancel" label="Cancel run" question={`Cancel run ${row.key} in scope ${row.scope}?`} body={ref} withReason danger onDone={reload}>
              <p>The run is finished as cancelled, for good: a retry with its key gets "cancelled". A process running it stops at its next step boundary; a step in flight either commits or not at all.</p>
            </ActionButton>
          ) : null}
        </div>
      ) : null}
      <div class="columns">
        <Stored text={match.input} label="Input" />
        {row.outcome !== null ? <Stored text={row.outcome} label={row.outcomeOk ? 'Output' : row.status === 'cancelled' ? 'Reason' : 'Error (stored)'} /> : null}
        {row.lastError ? <Stored text={row.lastError} label="Last error" /> : null}
      </div>
      <Section title={`Steps (${match.items.length})`}>
        {match.items.length === 0 ? <Empty>No step recorded yet.</Empty> : <Waterfall match={match} nowMs={nowMs} />}
        {match.items.map((item) => <StepDetails key={item.key} item={item} nowMs={nowMs} onChange={reload} />)}
      </Section>
      <Section title={`Child runs (${match.children.length})`}>
        {match.children.length === 0 ? (
          <Empty>No child run started.</Empty>
        ) : (
          <table class="grid compact">
            <caption>Runs this run started (steps.x.child, startChild): a child's end wakes its parent</caption>
            <thead><tr><th scope="col">Key</th><th scope="col">Workflow</th><th scope="col">Status</th><th scope="col">Executions</th><th scope="col">Started</th><th scope="col">Took</th></tr></thead>
            <tbody>
              {match.children.map((child) => (
                <tr key={child.key}>
                  <td class="key"><a href={href('run', { scope: child.scope, key: child.key })} title={child.key}>{shortKey(child.key)}</a></td>
                  <td>{child.workflow}{child.version !== null ? `@${child.version}` : ''}</td>
                  <td><RunStatus name={child.runStatus} /></td>
                  <td class="num">{child.attempts}</td>
                  <td><Time at={child.createdAt} now={nowMs} /></td>
                  <td>{child.completedAt === null ? '—' : duration(child.completedAt - child.createdAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
      {match.reruns.length ? (
        <p class="crumbs">
          Rerun as {match.reruns.map((rerun, index) => <span key={rerun}>{index ? ', ' : ''}<a href={href('run', { scope: row.scope, key: rerun })}>{rerun}</a></span>)}
        </p>
      ) : null}
      <Section title="Audit">
        {match.audit.length ? <AuditTable entries={match.audit} nowMs={nowMs} /> : <Empty>No operator action on this run.</Empty>}
      </Section>
    </>
  );
}

/** Where a queued run stands: `reports · partition acme · priority 0 · #3 of 12 waiting in its partition (40 in the queue)`. */
function queueFact(place: QueuePlaceView, nowMs: number): string {
  const where = `${place.queue}${place.partition ? ` · partition ${place.partition}` : ''} · priority ${place.priority}`;
  if (place.holding || place.position === null) return `${where} · holds a slot`;
  const line = place.partition ? `in its partition (${place.queueWaiting} in the queue)` : 'in the queue';
  const delayed = place.notBefore > nowMs ? ` · not before ${new Date(place.notBefore).toISOString()}` : '';
  return `${where} · #${place.position} of ${place.partitionWaiting} waiting ${line}${delayed}`;
}
