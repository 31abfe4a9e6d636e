/** Short human forms of times, durations and stored values. Everything is shown as text, never as HTML. */
import { formatDuration, plural } from '../../cli/format.js';

export { plural };

/** 850 ms, 12.3 s, 4m 05s, 3h 12m, 2d 4h: the CLI's own forms. */
export const duration = formatDuration;

/** "3.2 s ago" or "in 5.0 s", from `at` to `now` (both database time). */
export function ago(at: number, now: number): string {
  const delta = at - now;
  return delta > 0 ? `in ${duration(delta)}` : `${duration(delta)} ago`;
}

export function iso(at: number | null | undefined): string {
  return at === null || at === undefined ? '' : new Date(at).toISOString();
}

/** Stored JSON text, indented when it parses; the text itself otherwise. */
export function pretty(text: string | null | undefined): string {
  if (text === null || text === undefined) return '';
  if (text === '') return '(no value)';
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** The message of a stored error ({ name, message } JSON), or the text itself. */
export function errorMessage(text: string | null | undefined): string {
  if (!text) return '';
  try {
    const parsed = JSON.parse(text) as { name?: unknown; message?: unknown };
    if (parsed && typeof parsed.message === 'string') {
      return typeof parsed.name === 'string' && !['Error', 'RunCancelled'].includes(parsed.name) ? `${parsed.name}: ${parsed.message}` : parsed.message;
    }
  } catch {
    // Not JSON.
  }
  return text;
}

/** One line, at most `max` characters. */
export function clip(text: string, max = 90): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** A key shown short: the first 12 characters of a long hex key. */
export function shortKey(key: string): string {
  return /^[0-9a-f]{64}$/.test(key) ? `${key.slice(0, 12)}…` : key;
}
