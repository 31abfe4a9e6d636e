/** The dashboard's browser app: a hash router over six pages, the session, the header. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './style.css';
import type { SessionView } from '../api-types.js';
import { loadSession } from './api.js';
import { Header } from './components/header.js';
import { SessionContext } from './session.js';
import { KeyPage } from './pages/key.js';
import { OutboxPage } from './pages/outbox.js';
import { QueuesPage } from './pages/queues.js';
import { RunPage } from './pages/run.js';
import { RunsPage } from './pages/runs.js';
import { WorkersPage } from './pages/workers.js';
import { parseRoute, type Route } from './route.js';

function App() {
  const [route, setRoute] = useState<Route>(parseRoute(location.hash));
  const [session, setSession] = useState<SessionView | undefined>();
  const [failure, setFailure] = useState<string | undefined>();
  const refreshSession = () =>
    loadSession().then(
      (loaded) => {
        setSession(loaded);
        setFailure(undefined);
      },
      (error: unknown) => setFailure(error instanceof Error ? error.message : String(error)),
    );
  useEffect(() => {
    const onHash = () => {
      setRoute(parseRoute(location.hash));
      window.scrollTo(0, 0);
    };
    addEventListener('hashchange', onHash);
    void refreshSession();
    return () => removeEventListener('hashchange', onHash);
  }, []);
  useEffect(() => {
    document.title = `${route.title} · stepkey`;
    document.getElementById('main')?.focus({ preventScroll: true });
  }, [route.page, route.title]);
  if (!session) {
    return <main id="main" class="loading">{failure ? <p role="alert">The dashboard cannot be reached: {failure}</p> : <p>Loading…</p>}</main>;
  }
  return (
    <SessionContext.Provider value={{ session, refresh: refreshSession }}>
      <a class="skip" href="#main" onClick={(event) => { event.preventDefault(); document.getElementById('main')?.focus(); }}>Skip to content</a>
      <Header route={route} />
      <main id="main" tabIndex={-1}>
        {!session.canRead ? (
          <p class="notice">This dashboard needs its access token to show anything: sign in above.</p>
        ) : route.page === 'run' ? (
          <RunPage params={route.params} />
        ) : route.page === 'key' ? (
          <KeyPage params={route.params} />
        ) : route.page === 'outbox' ? (
          <OutboxPage params={route.params} />
        ) : route.page === 'queues' ? (
          <QueuesPage />
        ) : route.page === 'workers' ? (
          <WorkersPage />
        ) : (
          <RunsPage params={route.params} />
        )}
      </main>
    </SessionContext.Provider>
  );
}

render(<App />, document.getElementById('app')!);
