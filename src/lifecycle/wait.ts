/**
 * What a parked run waits for. A run that waits is a row with a wake
 * condition: status `waiting`, no lease, the kind of wait, the step that
 * waits, what it waits for, and when it is due (`wake_at <= now()`; null:
 * only when something marks it due). The same columns stay on the row while
 * the woken run executes again, until the waiting step's record commits, so
 * a run resumed at any point finds the wait it was in — its timer is never
 * restarted, its deadline never moved.
 */
export type WaitKind = 'timer' | 'event' | 'child' | 'slot' | 'limit' | 'review';

export interface RunWait {
  kind: WaitKind;
  /** The waiting step's instance name (`name` or `name[id]`). */
  step: string;
  /** An event's topic, a child's key; null for a timer. */
  for: string | null;
  /** When it is due (ms since the epoch, stepkey's clock), or null. */
  wakeAtMs: number | null;
}

/** The columns a recorded wait is read from. */
export interface WaitColumns {
  wait_kind: string | null;
  wait_step: string | null;
  wait_for: string | null;
  wake_at_ms: number | null;
}

export function waitFromColumns(row: WaitColumns): RunWait | undefined {
  if (!row.wait_kind || !row.wait_step) return undefined;
  return { kind: row.wait_kind as WaitKind, step: row.wait_step, for: row.wait_for, wakeAtMs: row.wake_at_ms };
}

/** SQL for a wait's columns, read as WaitColumns. */
export const waitColumnsSql = `wait_kind, wait_step, wait_for, (extract(epoch from wake_at) * 1000)::float8 as wake_at_ms`;

/** A parked run's wait, as callers see it (engine.get, attempt, tRPC's 202). */
export interface RunWaitView {
  kind: WaitKind;
  /** The waiting step. */
  step: string;
  /** When it is due: a timer's wake time, an event's deadline; null when only something else wakes it. */
  until: Date | null;
  /** An event's topic, a child run's key. */
  for: string | null;
}

export function waitView(wait: { kind: string; step: string; for: string | null; wakeAtMs: number | null }): RunWaitView {
  return {
    kind: wait.kind as WaitKind,
    step: wait.step,
    until: wait.wakeAtMs === null ? null : new Date(wait.wakeAtMs),
    for: wait.for,
  };
}
