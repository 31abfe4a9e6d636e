/**
 * What a keyed call can be told (the options a tRPC procedure and an HTTP
 * handler share), and what its work is handed: the claim's transaction, or —
 * failing open while Postgres is down — only the key and scope.
 */
import type { DrizzleTx } from '../db/connect.js';
import type { TxSql } from '../db/transaction.js';

export interface KeyedCallOptions {
  /** 'required' (default): a call without a key gets 400. 'optional': it runs without idempotency. */
  mode?: 'required' | 'optional';
  /**
   * When Postgres cannot be reached (database_unavailable) before the work
   * ran: 'closed' (default) answers 503 + Retry-After, 'open' runs the work
   * without idempotency (its context says `bypassed: true`). Any other
   * database failure answers 500 either way: it is not an outage to ride out.
   */
  onLedgerDown?: 'closed' | 'open';
  /** Volatile input fields left out of the fingerprint, e.g. ['clientTime']. */
  exclude?: string[];
  /** How long the key is kept after completion (default: the ledger's retention). */
  retentionMs?: number;
}

/** What the work of a keyed call is handed. */
export interface IdempotencyContext {
  key: string;
  scope: string;
  /** The claim's transaction: writes here commit together with the stored answer. */
  sql: TxSql;
  db: DrizzleTx;
  bypassed: false;
}

/**
 * What the work of a fail-open call (onLedgerDown: 'open') is handed while
 * Postgres is unavailable: nothing ties this run to its key, it may run again
 * on a retry, and there is no claim transaction to write in.
 */
export interface BypassedIdempotency {
  key: string;
  scope: string;
  bypassed: true;
}

type OptionOf<O, K extends keyof KeyedCallOptions> = K extends keyof O ? O[K] : undefined;

/** The context as the options allow: bypassed only when failing open, undefined only when optional. */
export type IdempotencyContextFor<O extends KeyedCallOptions> =
  | IdempotencyContext
  | ('open' extends OptionOf<O, 'onLedgerDown'> ? BypassedIdempotency : never)
  | ('optional' extends OptionOf<O, 'mode'> ? undefined : never);
