/** The ledger's vocabulary: keys, claims and stored outcomes. */

export type LedgerStatus = 'in_progress' | 'completed' | 'failed' | 'cancelled';

/** What a row is: an API request, a workflow run, one of its steps, an outbox effect. */
export type LedgerKind = 'request' | 'run' | 'step' | 'effect';

export interface KeyRef {
  scope: string;
  key: string;
}

export interface ClaimRequest extends KeyRef {
  /** sha256 of the canonical request; the same key with another is a mismatch. */
  fingerprint: string;
  kind?: LedgerKind;
  /** Procedure path, workflow name or step name: shown by inspect and in mismatch errors. */
  name?: string | null;
  /** The key of the root row this row belongs to (same scope). */
  parentKey?: string | null;
  /** Lease length for this claim (default: the ledger's). */
  leaseMs?: number;
  /** A run's metadata, written with its claim: the workflow's version and the validated input (JSON). */
  run?: { version: number; input: string };
}

/** A finished outcome, exactly as it was stored. */
export interface StoredOutcome {
  status: 'completed' | 'cancelled';
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

export type ClaimResult =
  /** The caller now holds the key. `resumed`: it took over an expired lease or a failed run. */
  | { state: 'owned'; lease: Lease; attempts: number; resumed: boolean }
  | { state: 'replay'; outcome: StoredOutcome }
  | { state: 'in_progress'; retryAfterMs: number }
  | { state: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

export interface OutcomeToStore {
  ok: boolean;
  body: string;
  code?: number | null;
}
