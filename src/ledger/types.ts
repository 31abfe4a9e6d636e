/** The ledger's vocabulary: keys, claims and stored outcomes. */

export type LedgerStatus = 'in_progress' | 'waiting' | 'completed' | 'failed' | 'cancelled' | 'deadline_exceeded';

/** What a row is: an API request, a workflow run, one of its steps, an outbox effect. */
export type LedgerKind = 'request' | 'run' | 'step' | 'effect';

/** What a claim may write: a run's steps are recorded by the engine alone, in stepkey.steps. */
export type ClaimKind = Exclude<LedgerKind, 'step'>;

export interface KeyRef {
  scope: string;
  key: string;
}

export interface ClaimRequest extends KeyRef {
  /** sha256 of the canonical request; the same key with another is a mismatch. */
  fingerprint: string;
  kind?: ClaimKind;
  /** Procedure path, workflow name or step name: shown by inspect and in mismatch errors. */
  name?: string | null;
  /** The key of the root row this row belongs to (same scope). */
  parentKey?: string | null;
  /** Lease length for this claim (default: the ledger's). */
  leaseMs?: number;
  /**
   * A run's metadata, written with its claim: the workflow's version, the
   * validated input (JSON) and the trace context of the call that starts it
   * (see telemetry/tracing.ts).
   */
  run?: {
    version: number;
    input: string;
    traceContext?: string | null;
    /** false: the run never holds a queue or limit slot, and its transitions skip giving them back (default true). */
    flow?: boolean;
    /** Its deadline: a duration from the claim (the database's clock), or a time (ms since the epoch). */
    deadline?: { inMs: number } | { atMs: number };
  };
  /** The root its derived keys come from (newRootKey), stored by the claim that inserts the row. */
  rootKey?: string;
  /**
   * The fingerprint this request had under the previous fingerprint version,
   * computed only when a stored row carries one of those (see fingerprint.ts).
   */
  legacyFingerprint?: () => string;
}

/** A finished outcome, exactly as it was stored. */
export interface StoredOutcome {
  status: 'completed' | 'cancelled' | 'deadline_exceeded';
  /** true for a success, false for a stored (deterministic) error. */
  ok: boolean;
  /** The stored text, byte for byte. */
  body: string;
  /** A status code stored with it (an HTTP status for API requests), or null. */
  code: number | null;
}

/** Holding a key: the token fences every later write against takeovers. */
export interface Lease extends KeyRef {
  token: string;
}

/** What a claim learns of a row that exists: the root its keys derive from and, for a run, its version. */
export interface ExistingRow {
  /** The stored root (null on rows from before roots were stored). */
  rootKey: string | null;
  /** A run's workflow version. */
  version: number | null;
}

/** What a parked run waits for, as a claim reads it (see workflow/waits). */
export interface ParkedWait {
  kind: string;
  step: string;
  for: string | null;
  untilMs: number | null;
}

export type ClaimResult =
  /**
   * The caller now holds the key. `resumed`: it took over an expired lease or
   * a failed run. `rootKey`: what was stored (null only for an old row taken over).
   * `heldQueue`: the queue whose slot a run taken over still holds (its process died while it ran).
   */
  | { state: 'owned'; lease: Lease; attempts: number; resumed: boolean; rootKey: string | null; deadlineAtMs?: number | null; heldQueue?: string }
  | ({ state: 'replay'; outcome: StoredOutcome } & ExistingRow)
  | ({ state: 'in_progress'; retryAfterMs: number } & Partial<ExistingRow>)
  /**
   * A parked run: it holds no lease and continues when its wait is due.
   * `resumed`: this claim resumed a failed run that is on a queue, and it was
   * parked waiting for a slot (its caller dispatches the queue).
   */
  | ({ state: 'waiting'; wait: ParkedWait; resumed?: true } & ExistingRow)
  | { state: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

export interface OutcomeToStore {
  ok: boolean;
  body: string;
  code?: number | null;
}

/** A run's own columns as executing it reads them: by a load (workflow/sql/load-run.ts), or by the dispatch that started it. */
export interface RunColumns {
  workflow: string;
  version: number;
  input: string;
  attempts: number;
  lastError: string | null;
  /** The stored root of its step keys (null on runs from before roots were stored). */
  rootKey: string | null;
  /** A child run's parent (its key in the same scope). */
  parentRun: string | null;
  /** Its deadline (ms since the epoch, stepkey's clock), or null. */
  deadlineAtMs: number | null;
}
