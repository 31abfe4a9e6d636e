/** The header: where you are, the open runs at a glance, and signing in to act. */
import { useState } from 'preact/hooks';
import type { SummaryView } from '../../api-types.js';
import { signIn, signOut } from '../api.js';
import { useLive } from '../live.js';
import { href, type Route } from '../route.js';
import { useSession } from '../session.js';

const pages = [
  { page: 'runs', label: 'Runs' },
  { page: 'key', label: 'Key lookup' },
  { page: 'outbox', label: 'Outbox' },
  { page: 'queues', label: 'Queues' },
  { page: 'workers', label: 'Workers' },
] as const;

export function Header({ route }: { route: Route }) {
  const { session } = useSession();
  return (
    <header class="top">
      <a class="brand" href={href('runs')}>stepkey</a>
      <nav aria-label="Pages">
        <ul>
          {pages.map(({ page, label }) => (
            <li key={page}>
              <a href={href(page)} aria-current={route.page === page || (page === 'runs' && route.page === 'run') ? 'page' : undefined}>
                {label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      {session.canRead ? <OpenRuns /> : null}
      <Access />
    </header>
  );
}

function OpenRuns() {
  const { session } = useSession();
  const summary = useLive<SummaryView>('summary', {});
  const open = session.statuses.filter((status) => status.open);
  return (
    <ul class="open-runs" aria-label="Open runs">
      {open.map((status) => {
        const count = summary.data?.open[status.name];
        return (
          <li key={status.name}>
            <a class={`chip tone-${count ? status.tone : 'muted'}`} href={href('runs', { status: status.name })} title={status.description}>
              {status.label} <strong>{count ?? '…'}</strong>
            </a>
          </li>
        );
      })}
    </ul>
  );
}

function Access() {
  const { session, refresh } = useSession();
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | undefined>();
  if (session.readOnly && !session.tokenConfigured) return <p class="access">Read-only</p>;
  if (session.signedIn) {
    return (
      <div class="access">
        <span>{session.readOnly ? 'Signed in · read-only' : 'Signed in · actions on'}</span>
        <button type="button" onClick={() => void signOut(session.csrf).then(refresh)}>Sign out</button>
      </div>
    );
  }
  return (
    <form
      class="access"
      onSubmit={(event) => {
        event.preventDefault();
        signIn(token).then(
          () => {
            setToken('');
            setError(undefined);
            return refresh();
          },
          (failure: unknown) => setError(failure instanceof Error ? failure.message : String(failure)),
        );
      }}
    >
      <label for="token">Access token</label>
      <input id="token" type="password" autoComplete="current-password" value={token} onInput={(event) => setToken(event.currentTarget.value)} required />
      <button type="submit">Sign in</button>
      {error ? <span role="alert" class="error-text">{error}</span> : null}
    </form>
  );
}
