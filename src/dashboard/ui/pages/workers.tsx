/** Workers: each pool's state and last beat, the jobs it holds, and the latest operator actions. */
import type { WorkersView } from '../../api-types.js';
import { AuditTable } from '../components/audit-table.js';
import { Chip, Empty, Live, Section, Time } from '../components/bits.js';
import { duration } from '../format.js';
import { useLive } from '../live.js';

export function WorkersPage() {
  const live = useLive<WorkersView>('workers', {});
  const view = live.data;
  return (
    <>
      <div class="page-head">
        <h1>Workers</h1>
        <Live checkedAt={live.checkedAt} error={live.error} />
      </div>
      {view ? (
        <>
          <p class="dim">
            A pool silent for {duration(view.deadAfterMs)} is declared dead by the other workers, which unlock its jobs (graphile-worker would keep them locked for four hours).
          </p>
          <Section title="Worker pools">
            {view.pools.length === 0 ? <Empty>No worker has run against this database in the last day.</Empty> : (
              <table class="grid">
                <thead>
                  <tr><th scope="col">State</th><th scope="col">Pool</th><th scope="col">Host</th><th scope="col" class="num">PID</th><th scope="col">Started</th><th scope="col">Last beat</th><th scope="col">Stopped / unlocked</th><th scope="col" class="num">Jobs held</th></tr>
                </thead>
                <tbody>
                  {view.pools.map((pool) => (
                    <tr key={pool.poolId}>
                      <td><Chip kind="pool" text={pool.state} /></td>
                      <td class="key">{pool.poolId}</td>
                      <td>{pool.hostname}</td>
                      <td class="num">{pool.pid}</td>
                      <td><Time at={pool.startedAt} now={view.nowMs} /></td>
                      <td><Time at={pool.lastBeatAt} now={view.nowMs} /></td>
                      <td>{pool.unlockedAt !== null && pool.state === 'unlocked' ? <>unlocked <Time at={pool.unlockedAt} now={view.nowMs} /></> : <Time at={pool.stoppedAt} now={view.nowMs} />}</td>
                      <td class="num">{pool.jobsHeld}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </Section>
          <Section title="Latest operator actions">
            {view.recentActions.length ? <AuditTable entries={view.recentActions} nowMs={view.nowMs} showTarget /> : <Empty>No action yet.</Empty>}
          </Section>
        </>
      ) : live.error ? null : <p>Loading…</p>}
    </>
  );
}
