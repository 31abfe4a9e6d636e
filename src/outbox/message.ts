/**
 * The job payload of an effect: the message's derived key, its scope and the
 * validated payload. The key is what consumers dedupe on. The payload travels
 * as JSON and is parsed again on every delivery, so an envelope is built only
 * for a payload whose JSON form passes the effect's schema too.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { toJsonText } from '../ledger/outcome.js';
import { summarise } from '../workflow/values.js';
import type { Effect } from './effect.js';

export interface Envelope {
  /** Message key. */
  k: string;
  /** Scope. */
  s: string;
  /** Payload. */
  p: unknown;
  /**
   * The job's max_attempts before a permanent failure lowered it: written into
   * the job by failJobForGood, read back by retryJobs. Absent otherwise.
   */
  m?: number;
}

/**
 * Validates `payload` against the effect's schema and returns the job payload
 * as JSON text. Guarantee: what it returns is what delivery will accept — the
 * payload read back from that text passes the schema, as consume() parses it.
 */
export function envelopeText(effect: Effect, key: string, scope: string, payload: unknown): string {
  const parsed = effect.payload.safeParse(payload);
  if (!parsed.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of effect '${effect.name}' is invalid: ${summarise(parsed.error)}. Nothing was enqueued.`,
      { cause: parsed.error },
    );
  }
  const text = toJsonText({ k: key, s: scope, p: parsed.data } satisfies Envelope, `payload of effect '${effect.name}'`);
  const delivered = effect.payload.safeParse((JSON.parse(text) as Envelope).p);
  if (!delivered.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of effect '${effect.name}' does not survive JSON: it is stored as JSON and parsed again on delivery, ` +
        `and its JSON form fails the schema (${summarise(delivered.error)}), so every delivery would fail. ` +
        'A payload schema must accept its own output in JSON form (for dates use dateField(); a transform’s result must pass the schema again). ' +
        'Nothing was enqueued.',
      { cause: delivered.error },
    );
  }
  return text;
}

export function readEnvelope(raw: unknown): Envelope | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const { k, s, p } = raw as Partial<Envelope>;
  return typeof k === 'string' && typeof s === 'string' ? { k, s, p } : undefined;
}
