/**
 * What a run's end means to its callers: a stored row or an execution's end
 * (Settled) turned into a result, a RunAttempt or a StepkeyError.
 *
 * A completed run's result is decoded with the output schema of the version
 * that ran it — not the caller's — so that a v1 run replayed after v2 changed
 * the output answers what v1 stored. A version no longer registered is a
 * clear error naming it, never a decode with another version's schema.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import type { StoredError } from '../ledger/outcome.js';
import type { LedgerRow } from '../ledger/sql/read.js';
import type { KeyRef, LedgerKind, ParkedWait } from '../ledger/types.js';
import { runStatusOf } from '../lifecycle/states.js';
import { waitView, type RunWaitView } from '../lifecycle/wait.js';
import type { Settled } from './executor.js';
import type { WorkflowRegistry } from './registry.js';
import { decodeValue } from './values.js';

export type RunAttempt<Result> =
  | { state: 'completed'; output: Result; replayed: boolean }
  /** A deterministic error ended the run; it is stored and replayed. */
  | { state: 'errored'; error: StoredError; replayed: boolean }
  /** Cancelled by an operator (stored, final); `replayed`: it had been cancelled before this call. */
  | { state: 'cancelled'; reason: StoredError; replayed: boolean }
  /** Its deadline passed before it ended (stored, final, like a cancellation). */
  | { state: 'deadline_exceeded'; reason: StoredError; replayed: boolean }
  /** The run is parked: it holds no process and continues when its wait is due. */
  | { state: 'waiting'; wait: RunWaitView; replayed: boolean }
  /** Executing elsewhere (another call holds it): ask again after `retryAfterMs`. */
  | { state: 'running'; retryAfterMs: number }
  /** Parked until an operator resolves its at-most-once call (engine.resolve): ask again after `retryAfterMs`. */
  | { state: 'needs_review'; retryAfterMs: number }
  | { state: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

type OutcomeFields = Pick<LedgerRow, 'status' | 'outcomeOk' | 'outcome' | 'lastError' | 'name' | 'version'>;

/** How a run's row ended (or that it is running elsewhere), by its status as lifecycle/states.ts names it. */
export function settledFromRow(row: OutcomeFields): Settled {
  const { status } = runStatusOf({ status: row.status, outcomeOk: row.outcomeOk, waitKind: null });
  switch (status) {
    case 'cancelled':
    case 'deadline_exceeded':
      return { state: status, reason: JSON.parse(row.outcome ?? '{}') };
    case 'failed':
      return { state: 'failed', error: JSON.parse(row.lastError ?? '{}') };
    case 'running':
      return { state: 'stopped', reason: 'lease_lost' };
    case 'completed':
      return { state: 'completed', body: row.outcome ?? '', workflow: row.name ?? '', version: row.version };
    case 'errored':
      return { state: 'errored', error: JSON.parse(row.outcome ?? '{}') };
    case 'waiting':
    case 'needs_review':
      throw new Error(`A ${status} run has not settled: its row is read as its wait, not an outcome.`);
  }
}

/** The row fields of a replayed claim. */
export function replayFields(
  workflow: string,
  outcome: { status: 'completed' | 'cancelled' | 'deadline_exceeded'; ok: boolean; body: string },
  version: number | null,
): OutcomeFields {
  return { status: outcome.status, outcomeOk: outcome.ok, outcome: outcome.body, lastError: null, name: workflow, version };
}

/** The result of a completed run, read with its own version's output schema. */
export function decodeRunResult(registry: WorkflowRegistry, settled: Extract<Settled, { state: 'completed' }>): unknown {
  const what = `The result of workflow '${settled.workflow}'`;
  if (settled.version === null) return decodeValue(settled.body, undefined, what);
  const definition = registry.get(settled.workflow, settled.version);
  if (!definition) {
    const known = registry.versions(settled.workflow);
    throw new StepkeyError(
      'version_not_found',
      `This run was completed by workflow '${settled.workflow}' version ${settled.version}, which this process does not ` +
        `register (registered: ${known.length ? known.join(', ') : 'none'}); its stored result is read only with that ` +
        "version's output schema. Keep old versions registered while their runs can be replayed.",
      { details: { workflow: settled.workflow, version: settled.version } },
    );
  }
  return decodeValue(settled.body, definition.output, `${what} v${settled.version}`);
}

/**
 * Retry-After for a run that needs review: it goes on only once an operator
 * has resolved it, so callers are told to ask again (tRPC: "in progress"), not "waiting".
 */
export const REVIEW_RETRY_AFTER_MS = 5_000;

export function toAttempt<R>(registry: WorkflowRegistry, settled: Settled, replayed: boolean): RunAttempt<R> {
  if (settled.state === 'waiting' && settled.wait.kind === 'review') return { state: 'needs_review', retryAfterMs: REVIEW_RETRY_AFTER_MS };
  switch (settled.state) {
    case 'completed':
      return { state: 'completed', output: decodeRunResult(registry, settled) as R, replayed };
    case 'errored':
      return { state: 'errored', error: settled.error, replayed };
    case 'cancelled':
      return { state: 'cancelled', reason: settled.reason, replayed };
    case 'deadline_exceeded':
      return { state: 'deadline_exceeded', reason: settled.reason, replayed };
    case 'waiting':
      return { state: 'waiting', wait: settled.wait, replayed };
    case 'failed':
      throw runFailed(settled.error);
    case 'stopped':
      throw stoppedError(settled.reason);
  }
}

/** A parked run's wait as a claim read it. */
export function parkedWait(wait: ParkedWait): RunWaitView {
  return waitView(wait);
}

export function unwrap(registry: WorkflowRegistry, ref: KeyRef, settled: Settled): unknown {
  switch (settled.state) {
    case 'completed':
      return decodeRunResult(registry, settled);
    case 'errored':
      throw new StepkeyError('run_failed', settled.error.message, { details: { error: settled.error, ...ref } });
    case 'cancelled':
      throw new StepkeyError('run_cancelled', `Run '${ref.key}' was cancelled: ${settled.reason.message}`, {
        details: { reason: settled.reason },
      });
    case 'deadline_exceeded':
      throw new StepkeyError('run_deadline_exceeded', `Run '${ref.key}' did not finish before its deadline.`, {
        details: { reason: settled.reason },
      });
    case 'failed':
      throw runFailed(settled.error);
    case 'waiting':
      throw new StepkeyError('in_progress', `Run '${ref.key}' is waiting (${settled.wait.kind} at step '${settled.wait.step}').`);
    case 'stopped':
      throw stoppedError(settled.reason);
  }
}

/** `covers`: what the fingerprint covers besides the operation (an enqueue's: its queue and priority too). */
export function mismatchError(ref: KeyRef, existing: { kind: LedgerKind; name: string | null }, covers = 'input'): StepkeyError {
  return new StepkeyError(
    'mismatch',
    `Key '${ref.key}' in scope '${ref.scope}' was first used for ${existing.kind} '${existing.name ?? '?'}' ` +
      `with another ${covers}; a key names one operation and cannot be reused with a different payload.`,
    { details: { existing } },
  );
}

function runFailed(error: StoredError): StepkeyError {
  return new StepkeyError('run_failed', `${error.message} (the run is resumable: retry with the same key)`, {
    retryable: true,
    details: { error, resumable: true },
  });
}

function stoppedError(reason: string): StepkeyError {
  switch (reason) {
    case 'shutting_down':
      return new StepkeyError('shutting_down', 'This process is shutting down; the run continues elsewhere.');
    case 'unavailable':
      return new StepkeyError(
        'database_unavailable',
        'The database stayed unavailable for longer than the step’s retries; the run is kept and continues once it is back.',
      );
    case 'start_lost':
      return new StepkeyError(
        'database_unavailable',
        'The database connection went before the run’s start was recorded; nothing of it was kept, and a retry starts it.',
      );
    default:
      return new StepkeyError('lease_lost', 'Another process took this run over; it continues there.');
  }
}
