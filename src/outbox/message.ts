/**
 * The job payload of an effect: the message's derived key, its scope and the
 * validated payload. The key is what consumers dedupe on.
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
}

/** Validates `payload` against the effect's schema and returns the job payload as JSON text. */
export function envelopeText(effect: Effect, key: string, scope: string, payload: unknown): string {
  const parsed = effect.payload.safeParse(payload);
  if (!parsed.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of effect '${effect.name}' is invalid: ${summarise(parsed.error)}. Nothing was enqueued.`,
      { cause: parsed.error },
    );
  }
  return toJsonText({ k: key, s: scope, p: parsed.data } satisfies Envelope, `payload of effect '${effect.name}'`);
}

export function readEnvelope(raw: unknown): Envelope | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const { k, s, p } = raw as Partial<Envelope>;
  return typeof k === 'string' && typeof s === 'string' ? { k, s, p } : undefined;
}
