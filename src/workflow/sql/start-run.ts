/**
 * A run starts with the ledger's claim of its (scope, key), kind 'run'. The
 * run's metadata — workflow name, version, validated input — is inserted in the
 * same statement, and only when the claim inserted the run's row: one round
 * trip, one commit, and a run never exists without what it needs to resume.
 */
import type { AlsoInsert } from '../../ledger/sql/claim.js';

export interface RunMetadata {
  scope: string;
  key: string;
  workflow: string;
  version: number;
  /** The validated input as JSON text. */
  input: string;
}

export function insertRunMetadata(meta: RunMetadata): AlsoInsert {
  return (q) => q`, run_metadata as (
      insert into stepkey.runs (scope, key, workflow, version, input)
      select ${meta.scope}, ${meta.key}, ${meta.workflow}, ${meta.version}::int, ${meta.input}
        from inserted
    )`;
}
