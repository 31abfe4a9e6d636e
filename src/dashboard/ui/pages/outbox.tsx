/** The outbox: jobs waiting in graphile-worker (failed first), by status, with retry. */
import type { JobsView } from '../../api-types.js';
import { Empty, Live, Section } from '../components/bits.js';
import { Jobs } from '../components/step-details.js';
import { duration } from '../format.js';
import { useLive } from '../live.js';
import { href } from '../route.js';
import { useSession } from '../session.js';

export function OutboxPage({ params }: { params: URLSearchParams }) {
  const { session } = useSession();
  const status = params.get('status') ?? undefined;
  const live = useLive<JobsView>('jobs', { status });
  const counts = live.data?.counts ?? {};
  return (
    <>
      <div class="page-head">
        <h1>Outbox</h1>
        <Live checkedAt={live.checkedAt} error={live.error} />
      </div>
      <nav aria-label="Jobs by status" class="tabs">
        <a href={href('outbox')} aria-current={status ? undefined : 'page'}>all</a>
        {session.jobStatuses.map((name) => (
          <a key={name} href={href('outbox', { status: name })} aria-current={status === name ? 'page' : undefined}>
            {name} <strong>{counts[name] ?? '…'}</strong>
          </a>
        ))}
      </nav>
      {live.data ? (
        <p class="dim">
          Oldest job due and not taken: {live.data.oldestPendingMs > 0 ? `waiting ${duration(live.data.oldestPendingMs)}` : 'none'}. Finished jobs are deleted; failed ones stay until retried.
        </p>
      ) : null}
      <Section title={status ? `${status} jobs` : 'Jobs'}>
        {live.data ? live.data.jobs.length ? <Jobs jobs={live.data.jobs} nowMs={live.data.nowMs} onChange={live.reload} showKey /> : <Empty>No {status ?? ''} jobs.</Empty> : <p>Loading…</p>}
      </Section>
    </>
  );
}
