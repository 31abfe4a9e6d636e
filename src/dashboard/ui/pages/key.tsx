/**
 * Key lookup — "was this charged twice?": a key (a caller's, or a derived
 * step key) in one scope or every scope, its row, every key derived from it,
 * and what each reached: rows in downstream ledgers, outbox jobs, deliveries.
 */
import type { KeyTreeView, MatchView } from '../../api-types.js';
import { Empty, Live, RunStatus, Stored, Time } from '../components/bits.js';
import { StepDetails } from '../components/step-details.js';
import { plural } from '../format.js';
import { useLive } from '../live.js';
import { href } from '../route.js';

export function KeyPage({ params }: { params: URLSearchParams }) {
  const key = params.get('key') ?? '';
  const scope = params.get('scope') ?? '';
  return (
    <>
      <div class="page-head"><h1>Key lookup</h1></div>
      <form
        class="filters"
        role="search"
        aria-label="Look a key up"
        onSubmit={(event) => {
          event.preventDefault();
          const form = new FormData(event.currentTarget);
          location.hash = href('key', { key: String(form.get('key') ?? '').trim(), scope: String(form.get('scope') ?? '').trim() });
        }}
      >
        <label class="grow">
          Key (a caller's key, or a derived step or message key)
          <input name="key" type="search" value={key} required maxLength={1024} />
        </label>
        <label>
          Scope (empty: every scope)
          <input name="scope" type="text" value={scope} size={16} />
        </label>
        <button type="submit" class="primary">Look up</button>
      </form>
      {key ? <Result keyText={key} scope={scope} /> : <Empty>Type a key: an order's Idempotency-Key, or a step key from a payment provider's dashboard.</Empty>}
    </>
  );
}

function Result({ keyText, scope }: { keyText: string; scope: string }) {
  const live = useLive<KeyTreeView>('key', { key: keyText, scope: scope || undefined });
  if (live.error && !live.data) return <p role="alert" class="error-text">{live.error}</p>;
  if (!live.data) return <p>Looking…</p>;
  const { matches, nowMs } = live.data;
  return (
    <>
      <Live checkedAt={live.checkedAt} error={live.error} />
      {matches.length === 0 ? <Empty>No key '{keyText}' {scope ? `in scope '${scope}'` : 'in any scope'}: it may never have existed, or it expired and was purged.</Empty> : null}
      {matches.map((match) => <Match key={`${match.row.scope}\u0000${match.row.key}`} match={match} nowMs={nowMs} />)}
    </>
  );
}

function Match({ match, nowMs }: { match: MatchView; nowMs: number }) {
  const { row } = match;
  const downstream = match.items.reduce((n, item) => n + item.downstream.length, 0);
  const jobs = match.items.reduce((n, item) => n + item.jobs.length, 0);
  const delivered = match.items.reduce((n, item) => n + item.inbox.length, 0);
  const twice = match.items.filter((item) => new Set(item.downstream.map((other) => other.scope)).size < item.downstream.length);
  return (
    <article class="match" aria-label={`${row.kind} ${row.key} in scope ${row.scope}`}>
      <h2>
        {row.kind} <span class="key">{row.key}</span> in scope <span class="key">{row.scope}</span>{' '}
        {match.runStatus ? <RunStatus name={match.runStatus} /> : <span class="chip tone-muted">{row.status}</span>}
      </h2>
      <p class="verdict">
        {plural(match.items.length, 'derived key')} · {plural(downstream, 'row')} under them in downstream ledgers · {plural(jobs, 'job')} waiting · {plural(delivered, 'delivery', 'deliveries')}.{' '}
        {twice.length ? <strong class="error-text">Some key reached a downstream scope more than once.</strong> : downstream ? 'Each key reached each downstream ledger at most once.' : ''}
      </p>
      <p>
        {row.kind === 'run' ? <a href={href('run', { scope: row.scope, key: row.key })}>Open the run</a> : null}
        {row.kind === 'step' && row.parentKey ? <a href={href('run', { scope: row.scope, key: row.parentKey })}>Open the run this step belongs to</a> : null}
        {row.kind === 'run' || (row.kind === 'step' && row.parentKey) ? ' · ' : ''}created <Time at={row.createdAt} now={nowMs} />
      </p>
      {row.kind !== 'step' ? <Stored text={row.outcome} label={row.outcomeOk ? 'Stored outcome' : 'Stored error'} /> : null}
      {match.items.map((item) => <StepDetails key={item.key} item={item} nowMs={nowMs} />)}
    </article>
  );
}
