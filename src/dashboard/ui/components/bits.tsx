/** Small pieces every page uses: a status chip, a time, stored values, a live indicator. */
import type { ComponentChildren } from 'preact';
import { useStatus } from '../session.js';
import { ago, iso, pretty } from '../format.js';

/** A run's status, coloured by its tone (from the server's status table). */
export function RunStatus({ name }: { name: string | null }) {
  const status = useStatus(name);
  return (
    <span class={`chip tone-${status?.tone ?? 'muted'}`} title={status?.description ?? ''}>
      {status?.label ?? name ?? '—'}
    </span>
  );
}

const jobTones: Record<string, string> = { failed: 'danger', retrying: 'warning', pending: 'muted', running: 'active' };
const poolTones: Record<string, string> = { alive: 'ok', silent: 'warning', stopped: 'muted', unlocked: 'danger' };
const attemptTones: Record<string, string> = { ok: 'ok', failed: 'danger', unknown: 'warning' };

export function Chip({ text, kind }: { text: string; kind: 'job' | 'pool' | 'attempt' | 'plain' }) {
  const tones = kind === 'job' ? jobTones : kind === 'pool' ? poolTones : kind === 'attempt' ? attemptTones : {};
  const tone = tones[text] ?? (kind === 'attempt' ? 'warning' : 'muted');
  return <span class={`chip tone-${tone ?? 'muted'}`}>{text}</span>;
}

export function Time({ at, now }: { at: number | null | undefined; now: number }) {
  if (at === null || at === undefined) return <span class="dim">—</span>;
  return (
    <time dateTime={iso(at)} title={iso(at)}>
      {ago(at, now)}
    </time>
  );
}

/** A stored value (JSON text) in a scrollable block. */
export function Stored({ text, label }: { text: string | null | undefined; label: string }) {
  if (text === null || text === undefined) return null;
  return (
    <figure class="stored">
      <figcaption>{label}</figcaption>
      <pre tabIndex={0} aria-label={label}>{pretty(text)}</pre>
    </figure>
  );
}

export function Live({ checkedAt, error }: { checkedAt: number; error: string | undefined }) {
  if (error) return <p class="live stale" role="status">Not current: {error}</p>;
  return (
    <p class="live" role="status" aria-live="off">
      <span class="dot" aria-hidden="true" /> live{checkedAt ? `, checked ${new Date(checkedAt).toLocaleTimeString()}` : ''}
    </p>
  );
}

export function Section({ title, children, actions }: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <section aria-label={title}>
      <div class="section-head">
        <h2>{title}</h2>
        {actions}
      </div>
      {children}
    </section>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}
