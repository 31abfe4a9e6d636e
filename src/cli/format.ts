/**
 * Short human forms of durations, times and stored values, for tables and
 * trees. JSON output never goes through here: it carries the full values.
 */

/** 850 ms, 12.3 s, 4m 05s, 3h 12m, 2d 4h. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(abs)} ms`;
  if (abs < 60_000) return `${(abs / 1_000).toFixed(1)} s`;
  const seconds = Math.floor(abs / 1_000);
  if (abs < 3_600_000) return `${Math.floor(seconds / 60)}m ${String(seconds % 60).padStart(2, '0')}s`;
  const minutes = Math.floor(seconds / 60);
  if (abs < 86_400_000) return `${Math.floor(minutes / 60)}h ${String(minutes % 60).padStart(2, '0')}m`;
  const hours = Math.floor(minutes / 60);
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** "in 3.2 s" for a time ahead, "12m 05s ago" for one behind. */
export function relative(ms: number): string {
  return ms >= 0 ? `in ${formatDuration(ms)}` : `${formatDuration(ms)} ago`;
}

/** One line, at most `max` characters, ending with … when cut. */
export function truncate(text: string, max = 80): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= max ? line : `${line.slice(0, Math.max(1, max - 1))}…`;
}

/** The message of a stored error (`{ name, message }` JSON), or the text itself. */
export function errorMessage(text: string | null | undefined): string {
  if (!text) return '';
  try {
    const parsed = JSON.parse(text) as { name?: unknown; message?: unknown };
    if (parsed && typeof parsed.message === 'string') {
      return typeof parsed.name === 'string' && parsed.name !== 'Error' ? `${parsed.name}: ${parsed.message}` : parsed.message;
    }
  } catch {
    // Not JSON: show it as it is.
  }
  return text;
}

/** Where Postgres raised a stored error (or one of its causes): `SQLSTATE 42P01, table orders`, or ''. */
export function databaseNote(text: string | null | undefined): string {
  if (!text) return '';
  try {
    type Stored = { db?: { sqlState?: string; table?: string; column?: string; constraint?: string }; cause?: Stored };
    for (let current: Stored | undefined = JSON.parse(text) as Stored; current; current = current.cause) {
      const db = current.db;
      if (db?.sqlState) {
        const parts = [`SQLSTATE ${db.sqlState}`];
        if (db.table) parts.push(`table ${db.table}`);
        if (db.column) parts.push(`column ${db.column}`);
        if (db.constraint) parts.push(`constraint ${db.constraint}`);
        return parts.join(', ');
      }
    }
  } catch {
    // Not JSON: nothing to add.
  }
  return '';
}

/** The message of a stored error and, when Postgres raised it, its SQLSTATE. */
export function errorLine(text: string | null | undefined): string {
  const note = databaseNote(text);
  return note ? `${errorMessage(text)} [${note}]` : errorMessage(text);
}

/** A stored outcome in a few words: the value's JSON, or "error: message". */
export function summarizeOutcome(text: string | null, ok: boolean | null, max = 72): string {
  if (text === null) return '';
  if (ok === false) return truncate(`error: ${errorLine(text)}`, max);
  return text === '' ? '(no value)' : truncate(text, max);
}

export function isoOrNull(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

export function plural(count: number, word: string, many = `${word}s`): string {
  return `${count} ${count === 1 ? word : many}`;
}
