/**
 * What the dashboard's JSON API answers: the contract between the server
 * (views.ts builds these from the read models) and the browser app (ui/).
 * Types only, no imports: the browser bundle compiles against this file.
 * Times are milliseconds since the epoch; `nowMs` is the database's now, so
 * the page shows ages and leases by the database's clock.
 */

export type Tone = 'danger' | 'warning' | 'active' | 'ok' | 'muted';

export interface StatusInfo {
  name: string;
  label: string;
  tone: Tone;
  open: boolean;
  resumable: boolean;
  description: string;
}

export interface SessionView {
  canRead: boolean;
  canAct: boolean;
  signedIn: boolean;
  /** No actions here at all (no token configured, or read-only mode). */
  readOnly: boolean;
  tokenConfigured: boolean;
  /** Sent back in the CSRF header with each action. */
  csrf: string | null;
  statuses: StatusInfo[];
  jobStatuses: string[];
  pollMs: number;
}

export interface RunRowView {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  status: string;
  resumable: boolean;
  attempts: number;
  waitKind: string | null;
  waitFor: string | null;
  wakeAt: number | null;
  createdAt: number;
  updatedAt: number;
  completedAt: number | null;
  ageMs: number;
  leaseLeftMs: number | null;
  /** Stored JSON text of the error or reason. */
  error: string | null;
  /** A run on a queue: its queue, partition and place in line; null otherwise. */
  queue: QueuePlaceView | null;
}

/** A run's place on a queue (read/sql/queue-places.ts). */
export interface QueuePlaceView {
  queue: string;
  /** '' for a queue without partitions, or one no run was put on yet. */
  partition: string;
  priority: number;
  /** Holds a slot; false: waiting for one. */
  holding: boolean;
  /** 1 = next in its partition's line (dispatch's order: priority, then first enqueued); null while it holds a slot. */
  position: number | null;
  partitionWaiting: number;
  queueWaiting: number;
  enqueuedAt: number;
  notBefore: number;
}

/** One queue's partition (read/sql/queues.ts, the read model of `stepkey queues`). */
export interface QueuePartitionView {
  queue: string;
  /** '' for a queue without partitions, or one no run was put on yet. */
  partition: string;
  concurrency: number;
  perPartition: number | null;
  /** `limit/periodms`, or null. */
  rateLimit: string | null;
  /** Runs waiting for a slot (the depth). */
  waiting: number;
  /** Slots held. */
  running: number;
  /** Slots granted since the queue was created: two readings apart give the rate of starts. */
  served: number;
  lastServedAt: string | null;
}

export interface QueuesView {
  partitions: QueuePartitionView[];
  nowMs: number;
}

export interface RunsView {
  runs: RunRowView[];
  next: string | null;
  nowMs: number;
}

export interface SummaryView {
  workflows: { workflow: string; versions: number[] }[];
  /** Runs in each open status, database-wide. */
  open: Record<string, number>;
  nowMs: number;
}

export interface LedgerRowView {
  scope: string;
  key: string;
  kind: string;
  name: string | null;
  parentKey: string | null;
  status: string;
  outcome: string | null;
  outcomeOk: boolean | null;
  outcomeCode: number | null;
  lastError: string | null;
  version: number | null;
  /** What the keys under this row derive from (null on rows from before it was stored). */
  rootKey: string | null;
  /** A run's wait: kind, step, what for, when due. */
  waitKind: string | null;
  waitStep: string | null;
  waitFor: string | null;
  wakeAt: number | null;
  parentRun: string | null;
  attempts: number;
  lockedUntil: number | null;
  expiresAt: number | null;
  createdAt: number;
  updatedAt: number;
  completedAt: number | null;
}

export interface JobView {
  id: string;
  task: string;
  key: string | null;
  attempts: number;
  maxAttempts: number;
  status: string;
  lastError: string | null;
  runAt: number;
  lockedBy: string | null;
}

export interface AuditView {
  id: number;
  scope: string;
  at: number;
  action: string;
  actor: string;
  source: string;
  key: string | null;
  jobId: string | null;
  applied: boolean;
  detail: string | null;
}

/** One recorded attempt of a call or enqueue step (the effect record): an attempt that has no end is unknown. */
export interface AttemptView {
  attempt: number;
  kind: 'call' | 'enqueue';
  startedAt: number;
  endedAt: number | null;
  outcome: 'ok' | 'failed' | 'unknown' | null;
  /** Stored JSON text of its error. */
  error: string | null;
  /** How an unknown outcome was settled (reconciled, absent, resolved, retried). */
  resolution: string | null;
}

export interface ItemView {
  name: string;
  key: string;
  kind: 'step' | 'message';
  row: LedgerRowView | null;
  /** Every attempt of a call or an enqueue, oldest first. */
  attempts: AttemptView[];
  downstream: LedgerRowView[];
  jobs: JobView[];
  inbox: { consumer: string; messageKey: string; processedAt: number; expiresAt: number }[];
}

/** A child run of the run shown. */
export interface ChildRunView {
  scope: string;
  key: string;
  workflow: string;
  version: number | null;
  runStatus: string;
  attempts: number;
  createdAt: number;
  completedAt: number | null;
}

export interface MatchView {
  row: LedgerRowView;
  rootKey: string;
  workflow: { name: string; version: number } | null;
  runStatus: string | null;
  input: string | null;
  items: ItemView[];
  audit: AuditView[];
  /** Child runs it started, oldest first. */
  children: ChildRunView[];
  /** Runs started as reruns of it (their keys, same scope). */
  reruns: string[];
  /** A run on a queue: its place there; null otherwise. */
  queue: QueuePlaceView | null;
}

export interface KeyTreeView {
  nowMs: number;
  matches: MatchView[];
}

export interface JobsView {
  jobs: JobView[];
  counts: Record<string, number>;
  oldestPendingMs: number;
  nowMs: number;
}

export interface PoolView {
  poolId: string;
  hostname: string;
  pid: number;
  state: 'alive' | 'silent' | 'stopped' | 'unlocked';
  startedAt: number;
  lastBeatAt: number;
  stoppedAt: number | null;
  unlockedAt: number | null;
  jobsHeld: number;
}

export interface WorkersView {
  pools: PoolView[];
  deadAfterMs: number;
  recentActions: AuditView[];
  nowMs: number;
}

/** Every read answers with its view's version; `since` that version answers `unchanged`. */
export type LiveEnvelope<T> = { version: string; data: T; unchanged?: false } | { version: string; unchanged: true };

export interface ActionAnswer {
  applied: boolean;
  previous?: string;
  retried?: string[];
  missed?: string[];
  message: string;
}
