/** The session (who may do what, the status table) for every component. */
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { SessionView, StatusInfo } from '../api-types.js';

export const SessionContext = createContext<{ session: SessionView; refresh: () => Promise<void> } | undefined>(undefined);

export function useSession(): { session: SessionView; refresh: () => Promise<void> } {
  const value = useContext(SessionContext);
  if (!value) throw new Error('useSession outside the app');
  return value;
}

export function useStatus(name: string | null | undefined): StatusInfo | undefined {
  const { session } = useSession();
  return session.statuses.find((status) => status.name === name);
}
