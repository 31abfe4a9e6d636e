/**
 * Sending an event to a run (`engine.send`). Checked before anything is
 * stored: the run exists and has not ended (a failed, resumable run keeps its
 * events), its workflow version is registered here and declares the topic,
 * and the payload passes the topic's schema and survives JSON. Then, in one
 * transaction: the run's row locked, the message kept under the sender's key
 * (see sql/mailbox.ts), and the run marked due if it is parked waiting for
 * the topic.
 */
import { inTransaction } from '../../db/transaction.js';
import { translateDatabaseError } from '../../errors/pg-errors.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { purposeFingerprint } from '../../keys/fingerprint.js';
import { assertStorableText, assertValidKey } from '../../keys/validate.js';
import { toJsonText } from '../../ledger/outcome.js';
import { isEnded } from '../../lifecycle/states.js';
import type { KeyRef } from '../../ledger/types.js';
import type { RunDeps } from '../run-state.js';
import { summarise } from '../values.js';
import { workflowMismatchError } from '../workflow-mismatch.js';
import { insertMessageStatement, lockTargetRun, type TargetRun } from './sql/mailbox.js';
import { wakeForEventStatement } from '../../lifecycle/wake.js';

/** What a send did. */
export interface Sent {
  /** false when the sender's key had already delivered this event (nothing new was kept). */
  delivered: boolean;
  /** The message's place in the run's mailbox (first in, first out). */
  seq: number;
}

export async function sendEvent(
  deps: RunDeps,
  ref: KeyRef,
  topic: string,
  payload: unknown,
  options: { key: string },
  /** The workflow the sender typed the event by (engine.send with a workflow or a workflow's ref): the run must be one of its. */
  workflow?: string,
): Promise<Sent & { woke: boolean }> {
  assertValidKey(options?.key, "sender's key of the event");
  assertStorableText(topic, "The event's topic");
  const what = `event '${topic}' for run '${ref.key}' in scope '${ref.scope}'`;
  try {
    return await inTransaction(deps.sql, async (tx) => {
      const [found] = await lockTargetRun(tx, deps.clock, ref.scope, ref.key);
      const run = found ?? (await startedMeanwhile(deps, tx, ref));
      if (run.expired) {
        throw new StepkeyError('run_not_found', `Cannot send ${what}: the run has expired (${run.status}); its key is a new request now. Nothing was stored.`);
      }
      if (workflow !== undefined && run.name !== workflow) {
        throw workflowMismatchError(ref, workflow, run, `send ${what}`, 'Send it typed by the run\'s own workflow, or untyped with engine.send(ref, …). Nothing was stored.');
      }
      const text = checkedPayload(deps, run, topic, payload);
      if (isEnded(run.status)) {
        throw new StepkeyError('run_ended', `Cannot send ${what}: the run has ended (${run.status}); nothing was stored.`);
      }
      const fingerprint = purposeFingerprint(topic, payload);
      const [kept] = await insertMessageStatement(tx, deps.clock, {
        scope: ref.scope,
        runKey: ref.key,
        topic,
        senderKey: options.key,
        fingerprint,
        payload: text,
      });
      if (!kept!.inserted) {
        if (kept!.fingerprint !== fingerprint) {
          throw new StepkeyError(
            'mismatch',
            `The sender's key '${options.key}' already sent ${what} with another payload; a key names one event.`,
          );
        }
        return { delivered: false, seq: kept!.seq, woke: false };
      }
      const woken = run.status === 'waiting' ? await wakeForEventStatement(tx, deps.clock, ref.scope, ref.key, topic) : [];
      return { delivered: true, seq: kept!.seq, woke: woken.length > 0 };
    });
  } catch (error) {
    throw translateDatabaseError(error, `sending ${what}`);
  }
}

/** The payload's stored text, after the topic's schema (declared by the run's own version) accepted it. */
function checkedPayload(deps: RunDeps, run: TargetRun, topic: string, payload: unknown): string {
  const definition = run.name !== null && run.version !== null ? deps.hooks.registry.get(run.name, run.version) : undefined;
  if (!definition) {
    throw new StepkeyError(
      'version_not_found',
      `Cannot check an event for a run of workflow '${run.name}' version ${run.version}: this process does not register that version.`,
    );
  }
  const schema = definition.events[topic];
  if (!schema) {
    const declared = Object.keys(definition.events);
    throw new StepkeyError(
      'invalid_input',
      `Workflow '${definition.name}' v${definition.version} declares no event '${topic}' ` +
        `(declared: ${declared.length ? declared.join(', ') : 'none'}); nothing was stored.`,
    );
  }
  const parsed = schema.safeParse(payload);
  if (!parsed.success) {
    throw new StepkeyError('invalid_input', `The payload of event '${topic}' is invalid: ${summarise(parsed.error)}; nothing was stored.`, {
      cause: parsed.error,
    });
  }
  const text = toJsonText(parsed.data, `payload of event '${topic}'`);
  const again = schema.safeParse(JSON.parse(text));
  if (!again.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of event '${topic}' does not survive JSON (${summarise(again.error)}): it is stored as JSON and parsed ` +
        'again when a run receives it. Use dateField() for dates. Nothing was stored.',
    );
  }
  return text;
}

/**
 * No run row: a start still uncommitted (its key's advisory lock is held) is
 * "in progress". A start that committed after the first read's snapshot —
 * while that read waited for the row the start replaced (an expired key
 * forgotten) — is read, and locked, by a second read whose snapshot comes
 * after the lock attempt. That read decides whenever it finds the row: a
 * committing transaction releases its advisory locks only after the row
 * locks its waiters wake on, so the attempt can fail for a start that has
 * already committed.
 */
async function startedMeanwhile(deps: RunDeps, q: Parameters<typeof lockTargetRun>[0], ref: KeyRef): Promise<TargetRun> {
  const [probe] = await q<{ free: boolean }[]>`
    select pg_try_advisory_xact_lock(hashtextextended(${ref.scope} || chr(31) || ${ref.key}, 0)) as free`;
  const [again] = await lockTargetRun(q, deps.clock, ref.scope, ref.key);
  if (again) return again;
  if (probe && !probe.free) {
    throw new StepkeyError('in_progress', `Run '${ref.key}' in scope '${ref.scope}' is still starting; send again in a moment.`);
  }
  throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'; nothing was stored.`);
}
