/** Runs: filtered by workflow, version, status, scope and time; newest first, paged by cursor; live. */
import type { RunRowView, RunsView, SummaryView } from '../../api-types.js';
import { Empty, Live, RunStatus, Time } from '../components/bits.js';
import { clip, duration, errorMessage } from '../format.js';
import { useLive } from '../live.js';
import { href } from '../route.js';
import { useSession } from '../session.js';

const filterNames = ['workflow', 'version', 'status', 'scope', 'from', 'to'] as const;

export function RunsPage({ params }: { params: URLSearchParams }) {
  const { session } = useSession();
  const filters: Record<string, string | undefined> = {};
  for (const name of filterNames) filters[name] = params.get(name) ?? undefined;
  const cursor = params.get('cursor') ?? undefined;
  const runs = useLive<RunsView>('runs', { ...filters, from: isoOf(filters.from), to: isoOf(filters.to), cursor });
  const summary = useLive<SummaryView>('summary', {});
  const versions = summary.data?.workflows.find((w) => w.workflow === filters.workflow)?.versions ?? [];
  return (
    <>
      <div class="page-head">
        <h1>Runs</h1>
        <Live checkedAt={runs.checkedAt} error={runs.error} />
      </div>
      <form
        class="filters"
        aria-label="Filter runs"
        onSubmit={(event) => {
          event.preventDefault();
          const form = new FormData(event.currentTarget);
          const next: Record<string, string> = {};
          for (const name of filterNames) next[name] = String(form.get(name) ?? '').trim();
          location.hash = href('runs', next);
        }}
      >
        <label>
          Workflow
          <select name="workflow" value={filters.workflow ?? ''}>
            <option value="">any</option>
            {summary.data?.workflows.map((w) => <option key={w.workflow} value={w.workflow}>{w.workflow}</option>)}
          </select>
        </label>
        <label>
          Version
          <input name="version" type="number" min={1} step={1} inputMode="numeric" value={filters.version ?? ''} list="versions" size={5} />
          <datalist id="versions">{versions.map((v) => <option key={v} value={String(v)} />)}</datalist>
        </label>
        <label>
          Status
          <select name="status" value={filters.status ?? ''}>
            <option value="">any</option>
            {session.statuses.map((s) => <option key={s.name} value={s.name}>{s.label}</option>)}
          </select>
        </label>
        <label>
          Scope
          <input name="scope" type="text" value={filters.scope ?? ''} size={14} />
        </label>
        <label>
          Created from
          <input name="from" type="datetime-local" step={1} value={filters.from ?? ''} />
        </label>
        <label>
          to
          <input name="to" type="datetime-local" step={1} value={filters.to ?? ''} />
        </label>
        <button type="submit" class="primary">Show</button>
        <a class="button" href={href('runs')}>Clear</a>
      </form>
      {runs.data ? <RunsTable view={runs.data} /> : runs.error ? null : <p>Loading…</p>}
      <nav class="pager" aria-label="Pages of runs">
        {cursor ? <a class="button" href={href('runs', { ...filters })}>First page</a> : null}
        {runs.data?.next ? <a class="button" href={href('runs', { ...filters, cursor: runs.data.next })}>Next page</a> : null}
      </nav>
    </>
  );
}

function RunsTable({ view }: { view: RunsView }) {
  if (view.runs.length === 0) return <Empty>No runs match.</Empty>;
  return (
    <table class="grid">
      <caption class="sr-only">Runs, newest first</caption>
      <thead>
        <tr>
          <th scope="col">Status</th>
          <th scope="col">Workflow</th>
          <th scope="col">Scope</th>
          <th scope="col">Key</th>
          <th scope="col" class="num">Attempts</th>
          <th scope="col">Created</th>
          <th scope="col">Lease / last error</th>
        </tr>
      </thead>
      <tbody>
        {view.runs.map((run) => (
          <tr key={`${run.scope}\u0000${run.key}`}>
            <td><RunStatus name={run.status} /></td>
            <td>{run.workflow}<span class="dim">@{run.version}</span></td>
            <td>{run.scope}</td>
            <td class="key"><a href={href('run', { scope: run.scope, key: run.key })}>{run.key}</a></td>
            <td class="num">{run.attempts}</td>
            <td><Time at={run.createdAt} now={view.nowMs} /></td>
            <td class="detail">{detail(run)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function detail(run: RunRowView): string {
  if (run.status === 'running') return `lease ${duration(run.leaseLeftMs ?? 0)} left`;
  if (run.status === 'stuck') return `lease expired ${duration(-(run.leaseLeftMs ?? 0))} ago: is a worker running?`;
  if (run.queue) {
    const place = run.queue;
    const where = `queue ${place.queue}${place.partition ? ` · ${place.partition}` : ''}`;
    if (place.holding || place.position === null) {
      if (run.status === 'running') return `lease ${duration(run.leaseLeftMs ?? 0)} left · a slot of ${where}`;
    } else if (run.waitKind === 'slot') {
      return `waits for a slot: ${where}, #${place.position} of ${place.partitionWaiting}${place.priority ? ` · priority ${place.priority}` : ''}`;
    }
  }
  if (run.status === 'waiting') return `waits for ${run.waitKind ?? '?'}${run.waitFor ? ` ${clip(run.waitFor, 40)}` : ''}${run.wakeAt !== null ? `, due ${new Date(run.wakeAt).toISOString()}` : ''}`;
  return clip(errorMessage(run.error));
}

/** A datetime-local value (local time) as an ISO instant for the server. */
function isoOf(local: string | undefined): string | undefined {
  if (!local) return undefined;
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}
