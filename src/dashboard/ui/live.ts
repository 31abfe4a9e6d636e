/**
 * Following a view as it changes: the page asks the dashboard every poll
 * interval with the version it has; the dashboard answers `unchanged` from
 * its shared cache, or the new data. (The database is polled once for all
 * tabs, by the server.)
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { loadView } from './api.js';
import { useSession } from './session.js';

export interface Live<T> {
  data: T | undefined;
  error: string | undefined;
  /** When the data was last confirmed current (ms, this browser's clock). */
  checkedAt: number;
  reload: () => void;
}

export function useLive<T>(view: string, params: Record<string, string | undefined>): Live<T> {
  const { session } = useSession();
  const [state, setState] = useState<{ data: T | undefined; error: string | undefined; checkedAt: number }>({ data: undefined, error: undefined, checkedAt: 0 });
  const [tick, setTick] = useState(0);
  const version = useRef<string | undefined>(undefined);
  const key = JSON.stringify([view, params]);
  const shown = useRef<string | undefined>(undefined);
  useEffect(() => {
    let stopped = false;
    let timer: number | undefined;
    if (shown.current !== key) {
      // Another view: forget the last one's data. (A reload of the same view keeps it on screen.)
      shown.current = key;
      version.current = undefined;
      setState({ data: undefined, error: undefined, checkedAt: 0 });
    }
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) if (value) query.set(name, value);
    const poll = async () => {
      try {
        const answer = await loadView<T>(view, query, version.current);
        if (stopped) return;
        if (!answer.unchanged) {
          version.current = answer.version;
          setState({ data: answer.data, error: undefined, checkedAt: Date.now() });
        } else setState((previous) => ({ ...previous, error: undefined, checkedAt: Date.now() }));
      } catch (error) {
        if (!stopped) setState((previous) => ({ ...previous, error: error instanceof Error ? error.message : String(error) }));
      }
      if (!stopped) timer = window.setTimeout(() => void poll(), session.pollMs);
    };
    void poll();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [key, tick]);
  return { ...state, reload: () => setTick((n) => n + 1) };
}
