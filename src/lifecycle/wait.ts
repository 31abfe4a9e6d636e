/**
 * What a waiting run waits for. A run that waits is a row with a wake
 * condition: status `waiting`, no lease, the kind of wait, the step that
 * waits, what it waits for, and two times with one meaning each — when the
 * wait itself ends (`wait_until`: a timer's time, an event's timeout, a
 * limit's next try; null when only something else ends it) and when any
 * sweeper may take the row (`wake_at`: the earlier of that and the run's
 * deadline, or now once something marked it due). The wait's columns stay on
 * the row while the woken run executes again, until the waiting step's record
 * commits, so a run resumed at any point finds the wait it was in — its timer
 * is never restarted, its timeout never moved.
 */
export type WaitKind = 'timer' | 'event' | 'child' | 'slot' | 'limit' | 'review';

export interface RunWait {
  kind: WaitKind;
  /** The waiting step's instance name (`name` or `name[id]`). */
  step: string;
  /** An event's topic, a child's key; null for a timer. */
  for: string | null;
  /** When the wait itself ends (ms since the epoch, stepkey's clock), or null: only something else ends it. */
  untilMs: number | null;
}

/** The columns a recorded wait is read from. */
export interface WaitColumns {
  wait_kind: string | null;
  wait_step: string | null;
  wait_for: string | null;
  wait_until_ms: number | null;
}

export function waitFromColumns(row: WaitColumns): RunWait | undefined {
  if (!row.wait_kind || !row.wait_step) return undefined;
  return { kind: row.wait_kind as WaitKind, step: row.wait_step, for: row.wait_for, untilMs: row.wait_until_ms };
}

/** SQL for a wait's columns, read as WaitColumns. */
export const waitColumnsSql = `wait_kind, wait_step, wait_for, (extract(epoch from wait_until) * 1000)::float8 as wait_until_ms`;

/** A parked run's wait, as callers see it (engine.get, attempt, tRPC's 202). */
export interface RunWaitView {
  kind: WaitKind;
  /** The waiting step. */
  step: string;
  /** When the wait itself ends: a timer's wake time, an event's timeout; null when only something else ends it. */
  until: Date | null;
  /** An event's topic, a child run's key. */
  for: string | null;
}

export function waitView(wait: { kind: string; step: string; for: string | null; untilMs: number | null }): RunWaitView {
  return {
    kind: wait.kind as WaitKind,
    step: wait.step,
    until: wait.untilMs === null ? null : new Date(wait.untilMs),
    for: wait.for,
  };
}
