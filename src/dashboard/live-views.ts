/**
 * One poll per dashboard process, shared by every open tab.
 *
 * Each page polls the dashboard (not the database) about once a second for
 * its view — the runs page with its filters, one run, the outbox… The
 * dashboard answers from a cache of views. While any view has been asked
 * for in the last `idleMs`, one timer sends one statement every `pollMs`:
 * the change probe (read/sql/figures.ts), Postgres's own write counters of
 * stepkey's tables and the next lease to expire. Only when it shows a change
 * are the cached views stale, and each is read again once, by the first tab
 * that asks, for all the tabs showing it.
 *
 * So ten tabs left open on a quiet system cost one statement a second; while
 * runs progress, one more read per distinct view per change.
 */
import { createHash } from 'node:crypto';
import type { Queryable } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { probeChanges } from '../read/sql/figures.js';

export interface LiveAnswer {
  version: string;
  data: unknown;
}

interface Entry {
  version: string | undefined;
  data: unknown;
  /** The generation the data was read in. */
  generation: number;
  loading: Promise<void> | undefined;
  seenAt: number;
}

export interface LiveStats {
  probes: number;
  reads: number;
}

export class LiveViews {
  readonly #q: Queryable;
  readonly #clock: Clock;
  readonly #pollMs: number;
  readonly #idleMs: number;
  readonly #entries = new Map<string, Entry>();
  readonly #onError: (error: unknown) => void;
  /** Bumped whenever the database changed: every view read before is stale. */
  #generation = 0;
  #timer: NodeJS.Timeout | undefined;
  #probing = false;
  #last: { writes: string | null; nextLeaseEndMs: number | null } | undefined;
  readonly stats: LiveStats = { probes: 0, reads: 0 };
  /** The database's clock minus this process's, from the last probe. */
  #dbOffsetMs = 0;

  constructor(q: Queryable, clock: Clock, options: { pollMs: number; idleMs?: number; onError: (error: unknown) => void }) {
    this.#q = q;
    this.#clock = clock;
    this.#pollMs = options.pollMs;
    this.#idleMs = options.idleMs ?? Math.max(10_000, options.pollMs * 5);
    this.#onError = options.onError;
  }

  /** The view's data, read now only if the cached one is stale or missing. */
  async get(key: string, read: () => Promise<unknown>): Promise<LiveAnswer> {
    let entry = this.#entries.get(key);
    if (!entry) {
      entry = { version: undefined, data: undefined, generation: -1, loading: undefined, seenAt: 0 };
      this.#entries.set(key, entry);
    }
    entry.seenAt = Date.now();
    this.#ensurePolling();
    if (entry.version === undefined || entry.generation !== this.#generation) {
      // One read for every tab asking meanwhile; a failed read rejects here for each of them.
      entry.loading ??= this.#read(entry, read);
      await entry.loading;
    }
    return { version: entry.version!, data: entry.data };
  }

  /** The database's now, as of the last probe (stepkey's clock offset included). */
  now(): number {
    return Date.now() + this.#dbOffsetMs;
  }

  /** Something changed here (an action): every view is read again. */
  invalidate(): void {
    this.#generation += 1;
  }

  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#entries.clear();
  }

  async #read(entry: Entry, read: () => Promise<unknown>): Promise<void> {
    const generation = this.#generation;
    try {
      this.stats.reads += 1;
      const data = await read();
      entry.data = data;
      entry.version = createHash('sha1').update(JSON.stringify(data)).digest('base64url').slice(0, 16);
      entry.generation = generation;
    } finally {
      entry.loading = undefined;
    }
  }

  #ensurePolling(): void {
    if (this.#timer) return;
    this.#last = undefined;
    this.#timer = setInterval(() => void this.#tick(), this.#pollMs);
    this.#timer.unref();
  }

  async #tick(): Promise<void> {
    const now = Date.now();
    for (const [key, entry] of this.#entries) if (now - entry.seenAt > this.#idleMs) this.#entries.delete(key);
    if (this.#entries.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    if (this.#probing) return;
    this.#probing = true;
    try {
      this.stats.probes += 1;
      const probe = await probeChanges(this.#q, this.#clock);
      this.#dbOffsetMs = probe.nowMs - Date.now();
      const last = this.#last;
      const changed =
        last === undefined ||
        probe.writes === null ||
        probe.writes !== last.writes ||
        (last.nextLeaseEndMs !== null && probe.nowMs >= last.nextLeaseEndMs);
      // The first probe of a polling spell also marks the views stale: a write may have come between their read and it.
      if (changed) this.invalidate();
      this.#last = { writes: probe.writes, nextLeaseEndMs: probe.nextLeaseEndMs };
    } catch (error) {
      this.#onError(error);
    } finally {
      this.#probing = false;
    }
  }
}
